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
)

// Member is one node as operators see it (trustplane members).
type Member struct {
	Name         string        `json:"name"`
	RaftAddr     string        `json:"raftAddr"`
	APIAddr      string        `json:"apiAddr,omitempty"`
	Voter        bool          `json:"voter"`
	Status       string        `json:"status"`
	RaftState    string        `json:"raftState"`
	LastContact  time.Duration `json:"lastContact"`
	AppliedIndex uint64        `json:"appliedIndex"`
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
