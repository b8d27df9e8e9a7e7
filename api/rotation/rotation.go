package rotation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// Phase is the phase of one key of a root.
type Phase string

const (
	// Pending keys are trusted and issue nothing.
	Pending Phase = "pending"
	// Active keys are trusted and issue.
	Active Phase = "active"
	// Retiring keys are trusted and issue no more.
	Retiring Phase = "retiring"
)

// Step is an operator's step of a rotation.
type Step string

const (
	StepStatus  Step = "status"
	StepStart   Step = "start"
	StepPromote Step = "promote"
	StepFinish  Step = "finish"
	StepAbort   Step = "abort"
)

// Steps are every step, in the order a rotation takes them (abort aside).
var Steps = []Step{StepStatus, StepStart, StepPromote, StepFinish, StepAbort}

// Sentinel errors of the steps; the HTTP interface turns them into codes.
var (
	// ErrNotReady: the cluster is not ready for the step (a member does
	// not trust the new key yet, a retiring key may still have valid
	// credentials out). The message says why; nothing changed.
	ErrNotReady = errors.New("rotation: not ready for this step")
	// ErrNoRotation: the step has nothing to act on (promote without a
	// pending key, abort after finish).
	ErrNoRotation = errors.New("rotation: no rotation in progress for this step")
)

// Key is one key of a root, as status shows it.
type Key struct {
	// ID names the key (a JWT kid, a certificate's fingerprint).
	ID    string `json:"id"`
	Phase Phase  `json:"phase"`
	// Since is when the key entered its phase (zero: unknown, a key
	// written before phases existed).
	Since time.Time `json:"since,omitempty"`
	// Created is when the key was made (zero: unknown).
	Created time.Time `json:"created,omitempty"`
	// Issues: this is the key new credentials are issued with.
	Issues bool `json:"issues"`
}

// Member is one member's view of a root.
type Member struct {
	Name string `json:"name"`
	// Trusts: the member has applied the keys the leader holds, so it
	// trusts every key the leader trusts.
	Trusts bool `json:"trusts"`
	// Detail says what the member lacks, if anything.
	Detail string `json:"detail,omitempty"`
}

// Status is where a root is.
type Status struct {
	Root    string   `json:"root"`
	Keys    []Key    `json:"keys"`
	Members []Member `json:"members,omitempty"`
	// Next is the step that moves the rotation on ("" when none is in
	// progress: start begins one), and Waiting what it waits for, if it
	// would be refused now.
	Next    Step   `json:"next,omitempty"`
	Waiting string `json:"waiting,omitempty"`
	// Done says what the step just taken did.
	Done string `json:"done,omitempty"`
	// Progress says how far the background work of a root's last step
	// has come (the values an encryption key rewrites), "" when it has
	// none.
	Progress string `json:"progress,omitempty"`
}

// Options modify a step.
type Options struct {
	// Force takes a step a safety check would refuse (finish before the
	// retiring key's credentials have expired). The check's reason is
	// still reported.
	Force bool
	// Key is the new key start brings in, for a root whose keys the
	// operator keeps a copy of (the gossip key, for nodes that join
	// later); nil makes one. Never echoed, logged or returned.
	Key []byte
}

// maxStepBody bounds a step's request body (a key, as JSON).
const maxStepBody = 64 << 10

// Root is one trust root. Every step runs on the leader, is idempotent,
// and returns the root's Status after it; a step the cluster is not ready
// for returns an error wrapping ErrNotReady and changes nothing.
type Root interface {
	Status(ctx context.Context) (*Status, error)
	Start(ctx context.Context, o Options) (*Status, error)
	Promote(ctx context.Context, o Options) (*Status, error)
	Finish(ctx context.Context, o Options) (*Status, error)
	Abort(ctx context.Context, o Options) (*Status, error)
}

// PathPrefix is where the steps are served: PathPrefix + root + "/" + step.
const PathPrefix = "/debug/trustplane/rotate/"

// Path is the API path of a step of a root.
func Path(root string, step Step) string { return PathPrefix + root + "/" + string(step) }

// Recorder is told of every step that may change a root (every step but
// status), taken or refused, after it ran: the operator interface records
// each as a Kubernetes Event. nil records nothing.
type Recorder interface {
	Step(root string, step Step, st *Status, err error)
}

// Handlers are the POST handlers of every step of every root, by path, for
// the API's operator actions (system:masters, run on the leader); rec is
// told of each step.
func Handlers(roots map[string]Root, rec Recorder) map[string]http.Handler {
	out := map[string]http.Handler{}
	names := make([]string, 0, len(roots))
	for n := range roots {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, step := range Steps {
			out[Path(n, step)] = stepHandler(n, roots[n], step, rec)
		}
	}
	return out
}

func stepHandler(name string, root Root, step Step, rec Recorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		o := Options{}
		if f := req.URL.Query().Get("force"); f != "" {
			force, err := strconv.ParseBool(f)
			if err != nil {
				http.Error(w, fmt.Sprintf("force=%q: not a boolean", f), http.StatusBadRequest)
				return
			}
			o.Force = force
		}
		if req.Body != nil {
			body, err := io.ReadAll(io.LimitReader(req.Body, maxStepBody+1))
			if err != nil || len(body) > maxStepBody {
				http.Error(w, "the request body is unreadable or over 64 KiB", http.StatusBadRequest)
				return
			}
			if len(body) > 0 {
				var in struct {
					Key []byte `json:"key"`
				}
				// The error never quotes the body: it may hold a key.
				if json.Unmarshal(body, &in) != nil {
					http.Error(w, `the request body is not {"key": "<base64>"}`, http.StatusBadRequest)
					return
				}
				o.Key = in.Key
			}
		}
		st, err := Run(req.Context(), root, step, o)
		if rec != nil && step != StepStatus {
			rec.Step(name, step, st, err)
		}
		switch {
		case errors.Is(err, ErrNotReady), errors.Is(err, ErrNoRotation):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
}

// Run takes step on root.
func Run(ctx context.Context, root Root, step Step, o Options) (*Status, error) {
	switch step {
	case StepStatus:
		return root.Status(ctx)
	case StepStart:
		return root.Start(ctx, o)
	case StepPromote:
		return root.Promote(ctx, o)
	case StepFinish:
		return root.Finish(ctx, o)
	case StepAbort:
		return root.Abort(ctx, o)
	}
	return nil, fmt.Errorf("rotation: unknown step %q", step)
}

func unix(s int64) time.Time { return time.Unix(s, 0).UTC() }
