package storage

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"github.com/trustplane/trustplane/watchcache"
)

// WatchStart resolves where a watch with opts starts: after revision start
// (0: after this node's applied index when the watch begins), with the
// state at that revision first as ADDED events when initial is set.
//
//   - sendInitialEvents=true (a streaming list): the state once this node
//     is fresh for resourceVersion (Fresh: "" is a read index), then every
//     change;
//   - "" : the most recent state, consistently: the state at a read
//     index, then every change after it;
//   - "0": the state at this node's applied index, then every change;
//   - N  : exactly the changes after N, with no initial state.
func (s *Storage) WatchStart(ctx context.Context, opts *metainternalversion.ListOptions) (start uint64, initial bool, err error) {
	rv := opts.ResourceVersion
	switch {
	case opts.SendInitialEvents != nil && *opts.SendInitialEvents:
		if err := s.Fresh(ctx, rv); err != nil {
			return 0, false, err
		}
		return 0, true, nil
	case rv == "":
		idx, err := s.ReadIndex(ctx)
		if err != nil {
			return 0, false, err
		}
		return idx, true, nil
	case rv == "0":
		return 0, true, nil
	}
	n, err := parseWatchResourceVersion(rv)
	if err != nil {
		return 0, false, err
	}
	return n, false, nil
}

// WatchTooOld is kube-apiserver's answer to a watch from a revision older
// than the window: 410 Gone, "too old resource version: N (oldest)". It
// goes to the client as an ERROR event, not as an HTTP error.
func WatchTooOld(err *watchcache.TooOldError) error {
	return apierrors.NewResourceExpired(err.Error())
}
