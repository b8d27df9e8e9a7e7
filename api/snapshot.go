package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/fsm/backup"
)

// snapshotPath streams a backup file (package fsm/backup) of the whole
// replicated state: `trustplane snapshot save`. Like the raft status it is
// outside the Kubernetes API, limited to system:masters (a backup holds
// every Secret and the token signing keys), and never forwarded: the node
// asked serves it from its own state after a read index confirmed by the
// leader, so it holds every write acknowledged before the request on a
// follower as on the leader, and no large body crosses the cluster. It is
// long-running (no request deadline, not counted in flight), because a
// large state takes longer to stream than the request timeout.
const snapshotPath = "/debug/trustplane/snapshot"

// snapshotWait bounds the wait for the read index and the local apply
// before any byte is streamed.
const snapshotWait = 10 * time.Second

// SnapshotSource is an optional capability of Membership, found by type
// assertion: a consistent copy of the state. A Membership without it
// answers 503 at snapshotPath.
type SnapshotSource interface {
	// Snapshot returns a point-in-time copy holding every write
	// acknowledged before the call, and a header with its Index, the
	// raft Term, the Node and the ClusterID filled in. It must fail,
	// rather than return a copy, when the leader cannot confirm a read
	// index (no leader, cut off): a backup that silently misses
	// acknowledged writes is worse than none, and the operator can retry
	// against another node.
	Snapshot(ctx context.Context) (*fsm.Export, backup.Header, error)
}

func (s *Server) serveSnapshot(w http.ResponseWriter, req *http.Request) {
	src, ok := s.cfg.Membership.(SnapshotSource)
	if !ok {
		s.writeError(w, req, apierrors.NewServiceUnavailable("snapshots are not available on this node"))
		return
	}
	if len(req.URL.Query()) > 0 {
		s.writeError(w, req, apierrors.NewBadRequest(fmt.Sprintf("%s takes no query parameters, got %q", snapshotPath, req.URL.RawQuery)))
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), snapshotWait)
	exp, h, err := src.Snapshot(ctx)
	cancel()
	if err != nil {
		s.writeError(w, req, retryLater(fmt.Sprintf("cannot take a consistent snapshot on this node: %v", err)))
		return
	}
	h.Created = time.Now().UTC()
	h.ServerVersion = trustplane.Version()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="trustplane-%d.snap"`, h.Index))
	w.Header().Set("X-Trustplane-Snapshot-Index", fmt.Sprint(h.Index))
	w.WriteHeader(http.StatusOK)
	if err := backup.Write(w, h, func(w io.Writer) error { return exp.WriteTo(w, nil) }); err != nil {
		// The status line is out: break the stream, so the client sees an
		// error rather than a clean end (and the file lacks its end marker
		// anyway, which backup.Open refuses as truncated).
		s.log.Warn("streaming a snapshot failed", "index", h.Index, "error", err)
		panic(http.ErrAbortHandler)
	}
}
