package storage_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/internal/memlog"
)

// staleStores is the same resource's storage on the leader (what other
// nodes' writes go through) and on a follower whose state trails it until
// it catches up (memlog.Follower).
func staleStores(t *testing.T) (leader, follower *storage.Store, l *memlog.Log, f *memlog.Follower) {
	t.Helper()
	l = memlog.New()
	f = memlog.NewFollower(l)
	build := func(b storage.Backend) *storage.Store {
		stor, err := storage.New(&storage.Config{FreshWait: time.Second}, b)
		if err != nil {
			t.Fatal(err)
		}
		return stor.MustForResource(t, storage.ResourceConfig{
			GVR: sasGVR, Codec: registry.StorageCodec(sasGVR.GroupVersion()), Convertor: registry.Scheme,
			NewFunc: func() runtime.Object { return &api.ServiceAccount{} },
		})
	}
	return build(l), build(f), l, f
}

func setLabel(v string) storage.UpdateFunc {
	return func(cur runtime.Object) (runtime.Object, error) {
		sa := cur.(*api.ServiceAccount)
		if sa.Labels == nil {
			sa.Labels = map[string]string{}
		}
		sa.Labels["k"] = v
		return sa, nil
	}
}

// TestWriteOnStaleState: a write executed on a node whose state trails the
// leader's gets the answer it would get on the leader. An answer made from
// the state read alone (404, a failed precondition, a no-op, a dry run) is
// confirmed by one read index first; a write that succeeds takes none; a
// write based on an old version is refused by the fsm and runs again on
// the current one.
func TestWriteOnStaleState(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// elsewhere runs on the leader before the follower's write, which
		// the follower has not applied.
		elsewhere func(t *testing.T, leader *storage.Store)
		write     func(follower *storage.Store, l *memlog.Log) (runtime.Object, error)
		noA       bool   // start without the object a
		code      int32  // 0: success
		label     string // on success: the label the stored object has
		seen      string // and the one tryUpdate saw, if it records one
		reads     int64  // read indexes taken
	}{{
		name:      "an update of an object created elsewhere is no 404",
		noA:       true,
		elsewhere: func(t *testing.T, l *storage.Store) { create(t, l, "a") },
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("a"), nil, setLabel("f"), storage.UpdateOptions{})
		},
		label: "f", reads: 1,
	}, {
		name: "a resourceVersion precondition newer than this node's state holds",
		elsewhere: func(t *testing.T, l *storage.Store) {
			update(t, l, "a", "l")
		},
		write: func(f *storage.Store, l *memlog.Log) (runtime.Object, error) {
			rv := storage.FormatResourceVersion(l.FSM.AppliedIndex()) // the leader's version
			return f.GuaranteedUpdate(ctx, key("a"), &metav1.Preconditions{ResourceVersion: &rv}, setLabel("f"), storage.UpdateOptions{})
		},
		label: "f", reads: 1,
	}, {
		name: "an update that changes nothing here but not on the leader is written",
		elsewhere: func(t *testing.T, l *storage.Store) {
			update(t, l, "a", "l")
		},
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("a"), nil, setLabel("0"), storage.UpdateOptions{})
		},
		label: "0", reads: 1,
	}, {
		name: "an update over an old version runs again on the current one, with no read index",
		elsewhere: func(t *testing.T, l *storage.Store) {
			update(t, l, "a", "l")
		},
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("a"), nil, func(cur runtime.Object) (runtime.Object, error) {
				sa := cur.(*api.ServiceAccount)
				sa.Labels["seen"] = sa.Labels["k"]
				return setLabel("f")(sa)
			}, storage.UpdateOptions{})
		},
		label: "f", seen: "l", reads: 0,
	}, {
		name:      "an update of an object deleted elsewhere is the fsm's 404, with no read index",
		elsewhere: func(t *testing.T, l *storage.Store) { remove(t, l, "a") },
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("a"), nil, setLabel("f"), storage.UpdateOptions{})
		},
		code: http.StatusNotFound, reads: 0,
	}, {
		name:      "an update of an object that never was is 404 after a read index",
		elsewhere: func(*testing.T, *storage.Store) {},
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("nothing"), nil, setLabel("f"), storage.UpdateOptions{})
		},
		code: http.StatusNotFound, reads: 1,
	}, {
		name:      "a dry-run create of a key taken elsewhere is 409",
		elsewhere: func(t *testing.T, l *storage.Store) { create(t, l, "b") },
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.Create(ctx, key("b"), sa("b"), storage.CreateOptions{DryRun: true})
		},
		code: http.StatusConflict, reads: 1,
	}, {
		name:      "a create of a key taken elsewhere is the fsm's 409, with no read index",
		elsewhere: func(t *testing.T, l *storage.Store) { create(t, l, "b") },
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.Create(ctx, key("b"), sa("b"), storage.CreateOptions{})
		},
		code: http.StatusConflict, reads: 0,
	}, {
		name:      "an update of an object this node has applied takes no read index",
		elsewhere: func(*testing.T, *storage.Store) {},
		write: func(f *storage.Store, _ *memlog.Log) (runtime.Object, error) {
			return f.GuaranteedUpdate(ctx, key("a"), nil, setLabel("f"), storage.UpdateOptions{})
		},
		label: "f", reads: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			leader, follower, l, f := staleStores(t)
			if !tc.noA {
				create(t, leader, "a")
				update(t, leader, "a", "0")
				f.CatchUp()
			}
			tc.elsewhere(t, leader)
			out, err := tc.write(follower, l)
			if got := f.ReadIndexes.Load(); got != tc.reads {
				t.Errorf("%d read indexes, want %d", got, tc.reads)
			}
			if tc.code != 0 {
				wantStatus(t, err, tc.code, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			kv, _, err := l.FSM.Get(key("a"), 0)
			if err != nil || kv == nil {
				t.Fatalf("stored: %v %v", kv, err)
			}
			if storage.RevisionOf(out) != kv.ModRevision {
				t.Fatalf("answered revision %d, stored %d", storage.RevisionOf(out), kv.ModRevision)
			}
			got, err := leader.Get(ctx, key("a"), "")
			if err != nil {
				t.Fatal(err)
			}
			if labels := got.(*api.ServiceAccount).Labels; labels["k"] != tc.label || labels["seen"] != tc.seen {
				t.Fatalf("stored labels %v, want k=%q seen=%q", labels, tc.label, tc.seen)
			}
		})
	}
}

// TestOwnWritesInOrder: a follower answers a write before applying it
// (cluster.Node.Submit), yet the next write through it reads that write:
// an update right after a create finds the object, and one right after an
// update is not refused by the fsm, with no read index either way.
func TestOwnWritesInOrder(t *testing.T) {
	ctx := context.Background()
	_, follower, l, f := staleStores(t)
	create(t, follower, "a")
	update(t, follower, "a", "1")
	before := l.FSM.AppliedIndex()
	update(t, follower, "a", "2")
	if l.FSM.AppliedIndex() != before+1 {
		t.Fatalf("the second update took %d entries, want 1: it was made over an old version", l.FSM.AppliedIndex()-before)
	}
	if got := f.ReadIndexes.Load(); got != 0 {
		t.Fatalf("%d read indexes, want none", got)
	}
	if _, err := follower.Get(ctx, key("a"), "0"); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, s *storage.Store, name string) {
	t.Helper()
	if _, err := s.Create(context.Background(), key(name), sa(name), storage.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func update(t *testing.T, s *storage.Store, name, label string) {
	t.Helper()
	if _, err := s.GuaranteedUpdate(context.Background(), key(name), nil, setLabel(label), storage.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, s *storage.Store, name string) {
	t.Helper()
	if _, err := s.Delete(context.Background(), key(name), 0); err != nil {
		t.Fatal(err)
	}
}

var _ storage.Backend = (*memlog.Follower)(nil)

// TestOwnWriteNotAppliedIs503: a node whose last answered write it has not
// applied, and cannot (it lost its leader after the leader committed it),
// refuses the next write with 503 and Retry-After, having sent nothing,
// not with the 504 that would call the outcome unknown.
func TestOwnWriteNotAppliedIs503(t *testing.T) {
	_, follower, l, f := staleStores(t)
	create(t, follower, "a") // answered at once, not applied here
	f.Cut.Store(true)
	before := l.FSM.AppliedIndex()
	_, err := follower.GuaranteedUpdate(context.Background(), key("a"), nil, setLabel("x"), storage.UpdateOptions{})
	wantStatus(t, err, http.StatusServiceUnavailable, "the cluster cannot serve the request right now: this node has not yet applied its own last write (revision 1; applied 0)")
	if secs, ok := apierrors.SuggestsClientDelay(err); !ok || secs != 1 {
		t.Fatalf("Retry-After %d (%v), want 1", secs, ok)
	}
	if l.FSM.AppliedIndex() != before {
		t.Fatal("the refused write reached the log")
	}
}
