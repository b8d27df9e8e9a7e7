package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubestorage "k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

var sasGVR = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}

func newStore(t *testing.T) (*storage.Store, *memlog.Log) {
	t.Helper()
	l := memlog.New()
	stor, err := storage.New(&storage.Config{FreshWait: 10 * time.Millisecond}, l)
	if err != nil {
		t.Fatal(err)
	}
	s := stor.MustForResource(t, storage.ResourceConfig{
		GVR: sasGVR, Codec: registry.StorageCodec(sasGVR.GroupVersion()), Convertor: registry.Scheme,
		NewFunc: func() runtime.Object { return &api.ServiceAccount{} },
	})
	return s, l
}

func key(name string) fsm.Key {
	return fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: name}
}

func sa(name string) *api.ServiceAccount {
	return &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
}

// wantStatus checks that err is a Status error with code and, if msg is
// set, exactly msg.
func wantStatus(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("error %v is not a Status, want %d %q", err, code, msg)
	}
	if got := st.Status(); got.Code != code || (msg != "" && got.Message != msg) {
		t.Fatalf("Status %d %q, want %d %q", got.Code, got.Message, code, msg)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCheckPreconditions(t *testing.T) {
	obj := sa("a")
	obj.ResourceVersion = "5"
	gr := sasGVR.GroupResource()
	tests := []struct {
		name string
		p    *metav1.Preconditions
		msg  string // non-empty: 409 with this message
	}{
		{name: "none hold trivially"},
		{name: "empty preconditions hold", p: &metav1.Preconditions{}},
		{name: "a matching UID and resourceVersion hold", p: &metav1.Preconditions{UID: ptr(types.UID("uid-a")), ResourceVersion: ptr("5")}},
		{name: "another UID is 409 with kube's message", p: &metav1.Preconditions{UID: ptr(types.UID("other"))},
			msg: `Operation cannot be fulfilled on serviceaccounts "a": Precondition failed: UID in precondition: other, UID in object meta: uid-a`},
		{name: "another resourceVersion is 409 with kube's message", p: &metav1.Preconditions{ResourceVersion: ptr("4")},
			msg: `Operation cannot be fulfilled on serviceaccounts "a": Precondition failed: ResourceVersion in precondition: 4, ResourceVersion in object meta: 5`},
		{name: "the UID is checked first", p: &metav1.Preconditions{UID: ptr(types.UID("other")), ResourceVersion: ptr("4")},
			msg: `Operation cannot be fulfilled on serviceaccounts "a": Precondition failed: UID in precondition: other, UID in object meta: uid-a`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := storage.CheckPreconditions(gr, "a", tc.p, obj)
			if tc.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantStatus(t, err, http.StatusConflict, tc.msg)
		})
	}
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	s, l := newStore(t)
	out, err := s.Create(ctx, key("a"), sa("a"), storage.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv := out.(*api.ServiceAccount).ResourceVersion; rv != fmt.Sprint(l.FSM.AppliedIndex()) {
		t.Fatalf("resourceVersion %q, want the applied index %d", rv, l.FSM.AppliedIndex())
	}
	tests := []struct {
		name string
		obj  *api.ServiceAccount
		opts storage.CreateOptions
		code int32
		msg  string
	}{
		{name: "a taken key is 409 AlreadyExists", obj: sa("a"),
			code: http.StatusConflict, msg: `serviceaccounts "a" already exists`},
		{name: "a taken generated name is kube's GenerateNameConflict", obj: sa("a"), opts: storage.CreateOptions{GeneratedName: true},
			code: http.StatusConflict, msg: `serviceaccounts "a" already exists, the server was not able to generate a unique name for the object`},
		{name: "a dry run at a taken key is 409 too", obj: sa("a"), opts: storage.CreateOptions{DryRun: true},
			code: http.StatusConflict, msg: `serviceaccounts "a" already exists`},
		{name: "a dry run at a free key stores nothing", obj: sa("b"), opts: storage.CreateOptions{DryRun: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := l.FSM.AppliedIndex()
			_, err := s.Create(ctx, key(tc.obj.Name), tc.obj, tc.opts)
			if tc.code != 0 {
				wantStatus(t, err, tc.code, tc.msg)
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.opts.DryRun && l.FSM.AppliedIndex() != before {
				t.Fatal("a dry run wrote to the log")
			}
		})
	}
	t.Run("a resourceVersion set on create is kube's plain storage error", func(t *testing.T) {
		obj := sa("c")
		obj.ResourceVersion = "7"
		if _, err := s.Create(ctx, key("c"), obj, storage.CreateOptions{}); !errors.Is(err, kubestorage.ErrResourceVersionSetOnCreate) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestGuaranteedUpdate(t *testing.T) {
	ctx := context.Background()
	s, l := newStore(t)
	if _, err := s.Create(ctx, key("a"), sa("a"), storage.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	label := func(v string) storage.UpdateFunc {
		return func(cur runtime.Object) (runtime.Object, error) {
			cur.(*api.ServiceAccount).Labels = map[string]string{"k": v}
			return cur, nil
		}
	}

	t.Run("an update is written at a new revision", func(t *testing.T) {
		out, err := s.GuaranteedUpdate(ctx, key("a"), nil, label("1"), storage.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if storage.RevisionOf(out) != l.FSM.AppliedIndex() {
			t.Fatalf("revision %d, want %d", storage.RevisionOf(out), l.FSM.AppliedIndex())
		}
	})
	t.Run("an update that changes nothing writes nothing", func(t *testing.T) {
		before := l.FSM.AppliedIndex()
		out, err := s.GuaranteedUpdate(ctx, key("a"), nil, label("1"), storage.UpdateOptions{})
		if err != nil || l.FSM.AppliedIndex() != before || storage.RevisionOf(out) != before {
			t.Fatalf("%v; applied %d -> %d", err, before, l.FSM.AppliedIndex())
		}
	})
	t.Run("a dry run writes nothing and shows the current resourceVersion", func(t *testing.T) {
		before := l.FSM.AppliedIndex()
		out, err := s.GuaranteedUpdate(ctx, key("a"), nil, label("2"), storage.UpdateOptions{DryRun: true})
		if err != nil || l.FSM.AppliedIndex() != before || storage.RevisionOf(out) != before ||
			out.(*api.ServiceAccount).Labels["k"] != "2" {
			t.Fatalf("%v %v; applied %d -> %d", out, err, before, l.FSM.AppliedIndex())
		}
	})
	t.Run("a failed precondition is 409 and tryUpdate does not run", func(t *testing.T) {
		_, err := s.GuaranteedUpdate(ctx, key("a"), &metav1.Preconditions{UID: ptr(types.UID("other"))},
			func(runtime.Object) (runtime.Object, error) { t.Fatal("tryUpdate ran"); return nil, nil }, storage.UpdateOptions{})
		wantStatus(t, err, http.StatusConflict,
			`Operation cannot be fulfilled on serviceaccounts "a": Precondition failed: UID in precondition: other, UID in object meta: uid-a`)
	})
	t.Run("a pinned revision that is not current is 409", func(t *testing.T) {
		_, err := s.GuaranteedUpdate(ctx, key("a"), nil, label("3"), storage.UpdateOptions{Revision: 1})
		wantStatus(t, err, http.StatusConflict,
			`Operation cannot be fulfilled on serviceaccounts "a": the object has been modified; please apply your changes to the latest version and try again`)
	})
	t.Run("a concurrent write makes it start again on the new object", func(t *testing.T) {
		runs := 0
		out, err := s.GuaranteedUpdate(ctx, key("a"), nil, func(cur runtime.Object) (runtime.Object, error) {
			runs++
			if runs == 1 {
				// Another writer gets in between the read and the write.
				if _, err := s.GuaranteedUpdate(ctx, key("a"), nil, label("other"), storage.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			sa := cur.(*api.ServiceAccount)
			sa.Annotations = map[string]string{"saw": sa.Labels["k"]}
			return sa, nil
		}, storage.UpdateOptions{})
		if err != nil || runs != 2 || out.(*api.ServiceAccount).Annotations["saw"] != "other" {
			t.Fatalf("%v after %d runs: %v", err, runs, out)
		}
	})
	t.Run("a missing object is 404", func(t *testing.T) {
		_, err := s.GuaranteedUpdate(ctx, key("nope"), nil, label("1"), storage.UpdateOptions{})
		wantStatus(t, err, http.StatusNotFound, `serviceaccounts "nope" not found`)
	})
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	s, l := newStore(t)
	out, err := s.Create(ctx, key("a"), sa("a"), storage.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev := storage.RevisionOf(out)
	_, err = s.Delete(ctx, key("a"), rev+100)
	wantStatus(t, err, http.StatusConflict,
		`Operation cannot be fulfilled on serviceaccounts "a": the object has been modified; please apply your changes to the latest version and try again`)
	at, err := s.Delete(ctx, key("a"), rev)
	if err != nil || at != l.FSM.AppliedIndex() {
		t.Fatalf("delete at %d (%v), want %d", at, err, l.FSM.AppliedIndex())
	}
	_, err = s.Delete(ctx, key("a"), 0)
	wantStatus(t, err, http.StatusNotFound, `serviceaccounts "a" not found`)
	_, err = s.Get(ctx, key("a"), "")
	wantStatus(t, err, http.StatusNotFound, `serviceaccounts "a" not found`)
}

func TestGetList(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if _, err := s.Create(ctx, key(n), sa(n), storage.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prefix := fsm.Prefix{Resource: "serviceaccounts", Namespace: "ns"}
	names := func(r storage.ListResult) (out []string) {
		for _, it := range r.Items {
			out = append(out, it.(*api.ServiceAccount).Name)
		}
		return out
	}

	first, err := s.GetList(ctx, prefix, &metainternalversion.ListOptions{Limit: 2}, nil)
	if err != nil || fmt.Sprint(names(first)) != "[a b]" || first.Continue == "" ||
		first.RemainingItemCount == nil || *first.RemainingItemCount != 3 || len(first.KVs) != 2 {
		t.Fatalf("first page %v %v: %+v", names(first), err, first)
	}
	second, err := s.GetList(ctx, prefix, &metainternalversion.ListOptions{Limit: 2, Continue: first.Continue}, nil)
	if err != nil || fmt.Sprint(names(second)) != "[c d]" || second.Revision != first.Revision {
		t.Fatalf("second page %v %v at %d, want [c d] at %d", names(second), err, second.Revision, first.Revision)
	}
	odd := func(obj runtime.Object) (bool, error) {
		n := obj.(*api.ServiceAccount).Name
		return n == "a" || n == "c" || n == "e", nil
	}
	filtered, err := s.GetList(ctx, prefix, &metainternalversion.ListOptions{Limit: 2}, odd)
	if err != nil || fmt.Sprint(names(filtered)) != "[a c]" || filtered.Continue == "" || filtered.RemainingItemCount != nil {
		t.Fatalf("filtered page %v %v: %+v (a filtered list has no remaining count)", names(filtered), err, filtered)
	}
	all, err := s.GetList(ctx, prefix, &metainternalversion.ListOptions{ResourceVersion: "0", Limit: 2}, nil)
	if err != nil || len(all.Items) != 5 || all.Continue != "" {
		t.Fatalf("a list at 0 ignores limit, as kube's watch cache does: %v %v", names(all), err)
	}
}

// TestItemEncodingBudget: list-item encodings are cached while the node's
// budget allows and computed for each call past it, the same bytes either
// way; the budget is never exceeded.
func TestItemEncodingBudget(t *testing.T) {
	ctx := context.Background()
	s, l := newStore(t)
	var kvs []*fsm.KV
	for i := range 10 {
		n := fmt.Sprint("sa-", i)
		if _, err := s.Create(ctx, key(n), sa(n), storage.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kv, _, err := l.Get(key(n), 0)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv)
	}
	one, err := s.ItemJSON(kvs[0])
	if err != nil {
		t.Fatal(err)
	}
	pb, err := s.ItemProtobuf(kvs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Room for the first object's two encodings and about two more.
	budget := int64(len(one)+len(pb)) + 2*int64(len(one))
	s.SetMaxItemEncodingBytes(budget)
	for pass := range 2 {
		for i, kv := range kvs {
			j, err := s.ItemJSON(kv)
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.ItemProtobuf(kv)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(j, []byte(fmt.Sprintf(`"name":"sa-%d"`, i))) || !bytes.Contains(p, []byte(fmt.Sprint("sa-", i))) {
				t.Fatalf("pass %d, item %d: wrong encodings %q, %q", pass, i, j, p)
			}
			if n := s.ItemEncodingBytes(); n > budget {
				t.Fatalf("pass %d: %d bytes of encodings cached, budget %d", pass, n, budget)
			}
		}
	}
	if n := s.ItemEncodingBytes(); n < int64(len(one)+len(pb)) {
		t.Fatalf("only %d bytes cached, though the budget allows %d", n, budget)
	}
}
