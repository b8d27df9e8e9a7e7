package storage

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// Watch starts a watch of the objects under prefix that match (nil: all),
// from where opts put it (WatchStart), with the bookmarks opts ask for.
// The events' objects are the shared decoded objects of this store: the
// caller must not modify them.
//
// Errors are Status errors the caller answers with before any event: 400
// for a malformed resourceVersion, 503 or 504 when the start cannot be made
// fresh, 405 when the node serves no watches. But a start older than the
// watch window is 410 Gone (IsResourceExpired), which kube-apiserver sends
// as an ERROR event on an accepted stream, not as an HTTP error: the
// caller must do the same.
func (s *Store) Watch(ctx context.Context, prefix fsm.Prefix, match Predicate, opts *metainternalversion.ListOptions) (*watchcache.Watcher, error) {
	if err := s.ownPrefix(prefix); err != nil {
		return nil, err
	}
	if s.watches == nil {
		return nil, apierrors.NewMethodNotSupported(s.gr(), "watch")
	}
	start, initial, err := s.WatchStart(ctx, opts)
	if err != nil {
		return nil, err
	}
	wopts := watchcache.WatchOptions{
		Prefix:           prefix,
		StartRevision:    start,
		Initial:          initial,
		Bookmarks:        opts.AllowWatchBookmarks,
		InitialEventsEnd: opts.SendInitialEvents != nil && *opts.SendInitialEvents,
	}
	if match != nil {
		wopts.Predicate = func(obj any) (bool, error) {
			o, ok := obj.(runtime.Object)
			if !ok {
				return false, fmt.Errorf("%w: watch cache object is %T", ErrNoResource, obj)
			}
			return match(o)
		}
	}
	w, err := s.watches.Watch(ctx, wopts)
	var tooOld *watchcache.TooOldError
	switch {
	case errors.As(err, &tooOld):
		return nil, WatchTooOld(tooOld)
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	return w, nil
}

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
