package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/cluster"
)

// Member is one node as operators see it (trustplane members).
type Member struct {
	Name         string        `json:"name"`
	RaftAddr     string        `json:"raftAddr"`
	APIAddr      string        `json:"apiAddr,omitempty"`
	Voter        bool          `json:"voter"`
	Replica      bool          `json:"replica,omitempty"`
	Status       string        `json:"status"`
	RaftState    string        `json:"raftState"`
	LastContact  time.Duration `json:"lastContact"`
	AppliedIndex uint64        `json:"appliedIndex"`
	// Version is the release the node runs, as it reported it ("" from a
	// build that reports none, or a node that did not answer).
	Version string `json:"version,omitempty"`
	// Formats are the versions of each format the node's build reads, as
	// it reported them (none from a build before they were reported, or
	// a node that did not answer).
	Formats map[string]cluster.Reads `json:"formats,omitempty"`
}

// Membership is what the members endpoint needs from the cluster.
type Membership interface {
	// Members lists every node known to Raft or gossip, so an operator sees
	// dead voters as well as live non-voters.
	Members(ctx context.Context) ([]Member, error)
	// RemoveMember removes a voter through the leader. It refuses when the
	// removal would cost the cluster its quorum, because an operator acting
	// on a stale view must not be able to take the cluster down.
	RemoveMember(ctx context.Context, name string) error
}

// ConfigurationMember is an optional capability of Membership, found by
// type assertion: whether this node is in the cluster's configuration. A
// node outside it (not yet added, or removed) applies nothing new, so
// answers served from its local state alone would be stale without bound.
type ConfigurationMember interface {
	InConfiguration() bool
}

// LeaderContact is an optional capability of Membership, found by type
// assertion: how recently this node heard from a leader.
type LeaderContact interface {
	// LeaderContactWithin reports whether this node's applied state holds
	// every write the cluster acknowledged more than d ago (it leads, or
	// heard from the leader within d and has applied what the leader had
	// then). One that has not may be cut off from the cluster or still
	// replaying its log, so its local state may be arbitrarily old.
	LeaderContactWithin(d time.Duration) bool
}

// LocalStateFresh is the bounded-staleness rule (--max-stale-read) for
// anything served from this node's applied state alone: resourceVersion=0
// reads and watches (refuseLocalRead), and the service account JWKS
// (authn.KeyStore.SetFresh). It holds when m cannot tell (no LeaderContact)
// or there is no bound (maxStale <= 0); otherwise only while this node's
// state holds every write the cluster acknowledged more than maxStale ago.
// A node just restarted from an old snapshot fails it until it has
// replayed its log.
func LocalStateFresh(m Membership, maxStale time.Duration) bool {
	lc, ok := m.(LeaderContact)
	return !ok || maxStale <= 0 || lc.LeaderContactWithin(maxStale)
}

// refuseLocalRead is the one rule for reads served from local state alone.
// A node outside the configuration serves no resourceVersion=0 get or list
// and no watch (every watch is
// served from the local watch cache), answering 503 with Retry-After so
// that clients retry, as kube-apiserver answers while it cannot serve. A
// read without a resourceVersion needs the leader's read index anyway, and
// one at resourceVersion N waits until N has applied here. A node that has
// not heard from a leader within MaxStaleRead is bounded the same way,
// except that its resourceVersion=0 reads become linearizable ones. It
// returns nil when the request may be served (possibly rewritten).
func (s *Server) refuseLocalRead(req *http.Request, verb string) error {
	if verb != "get" && verb != "list" && verb != "watch" {
		return nil
	}
	q := req.URL.Query()
	watch := verb == "watch" || q.Get("watch") == "true" || q.Get("watch") == "1"
	if !watch && q.Get("resourceVersion") != "0" {
		return nil
	}
	if cm, ok := s.cfg.Membership.(ConfigurationMember); ok && !cm.InConfiguration() {
		return retryLater("this apiserver is not a member of the cluster's current configuration and cannot serve resourceVersion=0 reads or watches; retry against another server")
	}
	// Second, bounded staleness: a node that has not heard from a leader
	// within MaxStaleRead serves no watch, and answers a
	// resourceVersion=0 get or list as a linearizable read (which needs
	// the leader, so a cut-off node answers 503) instead of from state
	// that may be arbitrarily old (kubernetes#59848).
	if LocalStateFresh(s.cfg.Membership, s.cfg.MaxStaleRead) {
		return nil
	}
	if watch {
		return s.staleWatch()
	}
	q.Del("resourceVersion")
	q.Del("resourceVersionMatch")
	req.URL.RawQuery = q.Encode()
	return nil
}

// staleWatch is the 503 of a watch on a node outside MaxStaleRead.
func (s *Server) staleWatch() *apierrors.StatusError {
	return retryLater(fmt.Sprintf("this apiserver has not heard from the cluster's leader for more than %v and cannot serve watches from its own state; retry against another server", s.cfg.MaxStaleRead))
}

// membersPath is the operator endpoint behind "trustplane members". Like
// /debug/pprof it is outside the Kubernetes API and limited to
// system:masters.
const membersPath = "/debug/trustplane/members"

var errNoMembership = errors.New("membership is not available on this node")

func (s *Server) serveMembers(w http.ResponseWriter, req *http.Request) {
	m := s.cfg.Membership
	if m == nil {
		s.writeError(w, req, apierrors.NewServiceUnavailable(errNoMembership.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	name := strings.TrimPrefix(strings.TrimPrefix(req.URL.Path, membersPath), "/")
	switch {
	case req.Method == http.MethodGet && name == "":
		members, err := m.Members(ctx)
		if err != nil {
			s.writeError(w, req, apierrors.NewServiceUnavailable(err.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(members)
	case req.Method == http.MethodDelete && name != "":
		if err := m.RemoveMember(ctx, name); err != nil {
			s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("removing member %q: %v", name, err)))
			return
		}
		w.WriteHeader(http.StatusOK)
		json.NewEncoder(w).Encode(map[string]string{"removed": name})
	default:
		s.writeError(w, req, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "members"}, req.Method))
	}
}
