package registry

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
)

// testBackend is the production wiring of Backend (cmd/trustplane's
// backend): writes and read index through a real raft node, local reads
// from its fsm.
type testBackend struct {
	node *cluster.Node
	fsm  *fsm.FSM
}

func (b *testBackend) Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	return b.node.Propose(ctx, cmd)
}
func (b *testBackend) ReadIndex(ctx context.Context) (uint64, error) { return b.node.ReadIndex(ctx) }
func (b *testBackend) AppliedIndex() uint64                          { return b.fsm.AppliedIndex() }
func (b *testBackend) WaitApplied(ctx context.Context, index uint64) error {
	return b.fsm.WaitApplied(ctx, index)
}
func (b *testBackend) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) {
	return b.fsm.Get(key, rev)
}
func (b *testBackend) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return b.fsm.List(p, opts)
}

// waitSignal is a Backend that closes waiting when a read first waits for
// an index, so a test can make the awaited write without sleeping.
type waitSignal struct {
	*testBackend
	once    sync.Once
	waiting chan struct{}
}

func (w *waitSignal) WaitApplied(ctx context.Context, index uint64) error {
	w.once.Do(func() { close(w.waiting) })
	return w.testBackend.WaitApplied(ctx, index)
}

// testFreshWait keeps reads of a future resourceVersion short.
const testFreshWait = 100 * time.Millisecond

// env is one single-node cluster with a bootstrapped registry.
type env struct {
	reg *Registry
	b   *testBackend
	ctx context.Context // carries the test user; no namespace
}

// newEnv starts a single-node raft cluster over mutual TLS, waits for it
// to lead and bootstraps the registry on it.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, CoreResources(), nil)
}

// newEnvWith is newEnv with resources, on a storage layer whose config
// configure may change, given the node's fsm (nil: as newEnv's).
func newEnvWith(t testing.TB, resources []*Resource, configure func(cfg *storage.Config, f *fsm.FSM)) *env {
	t.Helper()
	ca, err := certs.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pair, err := ca.EnsurePair(filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"), certs.Request{
		CommonName: "node", DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		Client: true, Server: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeName = "node-1"
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	f := fsm.New()
	node, err := cluster.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Shutdown() })
	for i := 0; !node.IsLeader(); i++ {
		if i == 1000 {
			t.Fatal("the single node did not become leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := &testBackend{node: node, fsm: f}
	scfg := &storage.Config{FreshWait: testFreshWait}
	if configure != nil {
		configure(scfg, f)
	}
	reg := newRegistry(t, scfg, b, resources)
	t.Cleanup(reg.storage.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "test-admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}})
	if err := reg.Bootstrap(genericapirequest.WithNamespace(ctx, ""), net.ParseIP("10.96.0.1"), 6443); err != nil {
		t.Fatal(err)
	}
	return &env{reg: reg, b: b, ctx: ctx}
}

// in returns the test context scoped to namespace ns ("" for cluster scope
// or all namespaces).
func (e *env) in(ns string) context.Context { return genericapirequest.WithNamespace(e.ctx, ns) }

func (e *env) store(t *testing.T, resource string) *Store {
	t.Helper()
	s := e.reg.Store(schema.GroupVersionResource{Version: "v1", Resource: resource})
	if s == nil {
		t.Fatalf("no store for %s", resource)
	}
	return s
}

func (e *env) namespace(t *testing.T, name string) *api.Namespace {
	t.Helper()
	out, err := e.store(t, "namespaces").Create(e.in(""), &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, false)
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return out.(*api.Namespace)
}

func (e *env) sa(t *testing.T, ns, name string, lbls map[string]string) *api.ServiceAccount {
	t.Helper()
	out, err := e.store(t, "serviceaccounts").Create(e.in(ns),
		&api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}, false)
	if err != nil {
		t.Fatalf("create serviceaccount %s/%s: %v", ns, name, err)
	}
	return out.(*api.ServiceAccount)
}

func (e *env) applied() uint64 { return e.b.fsm.AppliedIndex() }

// compact drops the history before the applied index, through the log as
// any compaction is.
func (e *env) compact(t *testing.T) {
	t.Helper()
	res, err := e.b.Propose(e.ctx, &fsm.Command{Op: fsm.OpCompact, CompactRevision: e.applied()})
	if err != nil || res.Err != nil {
		t.Fatalf("compact: %v %v", err, res)
	}
}

func rvOf(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("resourceVersion %q is not a positive integer", rv)
	}
	return n
}

func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// wantStatus checks that err is a Status error the predicate accepts and,
// if msg is set, that its message is exactly msg.
func wantStatus(t *testing.T, err error, is func(error) bool, what, msg string) {
	t.Helper()
	if err == nil || !is(err) {
		t.Fatalf("error = %v (code %d), want %s", err, statusCode(err), what)
	}
	if msg != "" && err.Error() != msg {
		t.Fatalf("message = %q, want %q", err.Error(), msg)
	}
}

// wantTooLarge checks kube-apiserver's answer to a read of a
// resourceVersion not applied in time (storage.NewTooLargeResourceVersionError):
// 504, Retry-After 1, a ResourceVersionTooLarge cause, and the message
// "Timeout: Too large resource version: N, current: M".
func wantTooLarge(t *testing.T, err error, want, have uint64) {
	t.Helper()
	wantStatus(t, err, apierrors.IsTimeout, "Timeout (504)",
		fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", want, have))
	if c := statusCode(err); c != 504 {
		t.Errorf("code = %d, want 504", c)
	}
	st := err.(apierrors.APIStatus).Status()
	if st.Details == nil || st.Details.RetryAfterSeconds != 1 {
		t.Errorf("Retry-After missing in %+v", st.Details)
	}
	if st.Details == nil || len(st.Details.Causes) != 1 ||
		st.Details.Causes[0] != (metav1.StatusCause{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}) {
		t.Errorf("causes in %+v, want one ResourceVersionTooLarge", st.Details)
	}
}

func TestStoreCreate(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := e.store(t, "serviceaccounts")

	t.Run("create sets uid, creationTimestamp and resourceVersion to the log index, increasing", func(t *testing.T) {
		var last uint64
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("sa-%d", i)
			out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, false)
			if err != nil {
				t.Fatal(err)
			}
			sa := out.(*api.ServiceAccount)
			if sa.UID == "" {
				t.Error("uid not set")
			}
			if sa.CreationTimestamp.IsZero() {
				t.Error("creationTimestamp not set")
			}
			if sa.Namespace != "ns" {
				t.Errorf("namespace = %q, want the request's namespace", sa.Namespace)
			}
			rv := rvOf(t, sa.ResourceVersion)
			if rv <= last {
				t.Errorf("resourceVersion %d is not greater than the previous write's %d", rv, last)
			}
			last = rv
			kv, _, err := e.b.fsm.Get(fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: name}, 0)
			if err != nil || kv == nil {
				t.Fatalf("fsm has no %s: %v", name, err)
			}
			if kv.ModRevision != rv || kv.CreateRevision != rv {
				t.Errorf("resourceVersion %d, but the fsm applied the create at log index %d (create %d)", rv, kv.ModRevision, kv.CreateRevision)
			}
			if applied := e.applied(); applied != rv {
				t.Errorf("resourceVersion %d, applied index right after the create %d", rv, applied)
			}
			if kv.UID != string(sa.UID) {
				t.Errorf("fsm uid %q, object uid %q", kv.UID, sa.UID)
			}
			got, err := sas.Get(e.in("ns"), name, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			g := got.(*api.ServiceAccount)
			if g.UID != sa.UID || g.ResourceVersion != sa.ResourceVersion || g.CreationTimestamp.Unix() != sa.CreationTimestamp.Unix() {
				t.Errorf("get returned uid %s rv %s created %s, create returned uid %s rv %s created %s",
					g.UID, g.ResourceVersion, g.CreationTimestamp, sa.UID, sa.ResourceVersion, sa.CreationTimestamp)
			}
		}
	})

	t.Run("create ignores a client-set uid", func(t *testing.T) {
		out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: "client-fields", UID: "client-uid",
		}}, false)
		if err != nil {
			t.Fatal(err)
		}
		sa := out.(*api.ServiceAccount)
		if sa.UID == "client-uid" {
			t.Error("the client's uid was kept")
		}
	})

	t.Run("create refuses a client-set resourceVersion", func(t *testing.T) {
		// kube-apiserver's storage refuses it; its handler answers 500.
		_, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: "client-rv", ResourceVersion: "12345678",
		}}, false)
		if err == nil || err.Error() != "resourceVersion should not be set on objects to be created" {
			t.Fatalf("create with a resourceVersion: %v", err)
		}
		// An unparsable one is no resourceVersion to kube: it is ignored.
		out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: "client-rv", ResourceVersion: "-1",
		}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if rv := out.(*api.ServiceAccount).ResourceVersion; rv == "-1" {
			t.Errorf("the client's resourceVersion was kept")
		}
	})

	e.sa(t, "ns", "x", nil)
	doomed := "doomed"
	e.namespace(t, doomed)
	if _, done, err := e.store(t, "namespaces").Delete(e.in(""), doomed, &metav1.DeleteOptions{}, false); err != nil || done {
		t.Fatalf("delete namespace %s: done=%v err=%v", doomed, done, err)
	}

	errCases := []struct {
		name string
		ns   string
		obj  *api.ServiceAccount
		is   func(error) bool
		what string
		msg  string
	}{
		{
			name: "create of an existing name is AlreadyExists",
			ns:   "ns", obj: &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
			is: apierrors.IsAlreadyExists, what: "AlreadyExists",
			msg: `serviceaccounts "x" already exists`,
		},
		{
			name: "create in a missing namespace is NotFound for the namespace",
			ns:   "nope", obj: &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "y"}},
			is: apierrors.IsNotFound, what: "NotFound",
			msg: `namespaces "nope" not found`,
		},
		{
			name: "create in a terminating namespace is Forbidden",
			ns:   doomed, obj: &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "y"}},
			is: apierrors.IsForbidden, what: "Forbidden",
			msg: `serviceaccounts "y" is forbidden: unable to create new content in namespace doomed because it is being terminated`,
		},
		{
			name: "create with an object namespace other than the request's is BadRequest",
			ns:   "ns", obj: &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "y", Namespace: "other"}},
			is: apierrors.IsBadRequest, what: "BadRequest",
		},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.applied()
			_, err := sas.Create(e.in(tc.ns), tc.obj, false)
			wantStatus(t, err, tc.is, tc.what, tc.msg)
			if tc.is(err) && !apierrors.IsAlreadyExists(err) && e.applied() != before {
				t.Errorf("a refused create wrote to the log (applied %d -> %d)", before, e.applied())
			}
		})
	}

	t.Run("create with an invalid name is Invalid with a cause on metadata.name", func(t *testing.T) {
		for _, name := range []string{"Bad_Name", "UPPER", "-leading-dash", strings.Repeat("a", 254)} {
			before := e.applied()
			_, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, false)
			wantStatus(t, err, apierrors.IsInvalid, "Invalid", "")
			st := err.(apierrors.APIStatus).Status()
			found := false
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					if c.Field == "metadata.name" {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("name %.20q: no cause on metadata.name in %+v", name, st.Details)
			}
			if e.applied() != before {
				t.Errorf("name %.20q: an invalid create wrote to the log", name)
			}
		}
	})

	t.Run("create with no name and no generateName is Invalid", func(t *testing.T) {
		_, err := sas.Create(e.in("ns"), &api.ServiceAccount{}, false)
		wantStatus(t, err, apierrors.IsInvalid, "Invalid", "")
	})

	t.Run("generateName gives the prefix and 5 random characters", func(t *testing.T) {
		out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		name := out.(*api.ServiceAccount).Name
		if !strings.HasPrefix(name, "gen-") || len(name) != len("gen-")+5 {
			t.Fatalf("generated name %q, want gen- and 5 characters", name)
		}
		if out.(*api.ServiceAccount).GenerateName != "gen-" {
			t.Errorf("generateName not kept")
		}
		if _, err := sas.Get(e.in("ns"), name, &metav1.GetOptions{}); err != nil {
			t.Errorf("get of the generated name: %v", err)
		}
	})

	t.Run("50 creates with the same generateName all succeed with distinct names", func(t *testing.T) {
		seen := map[string]bool{}
		for i := 0; i < 50; i++ {
			out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "many-"}}, false)
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			name := out.(*api.ServiceAccount).Name
			if seen[name] {
				t.Fatalf("name %s generated twice", name)
			}
			seen[name] = true
		}
	})

	t.Run("dry-run create validates, writes nothing and returns the object", func(t *testing.T) {
		before := e.applied()
		out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if sa := out.(*api.ServiceAccount); sa.Name != "dry" || sa.UID == "" || sa.CreationTimestamp.IsZero() {
			t.Errorf("returned %+v", sa.ObjectMeta)
		}
		if e.applied() != before {
			t.Error("a dry-run create wrote to the log")
		}
		_, err = sas.Get(e.in("ns"), "dry", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", "")
		_, err = sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"}}, true)
		wantStatus(t, err, apierrors.IsInvalid, "Invalid", "")
	})

	t.Run("create of a cluster-scoped object needs no namespace", func(t *testing.T) {
		out, err := e.store(t, "namespaces").Create(e.in(""), &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		ns := out.(*api.Namespace)
		if ns.Status.Phase != api.NamespaceActive {
			t.Errorf("phase = %q, want Active", ns.Status.Phase)
		}
	})
}

func TestStoreGet(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sa := e.sa(t, "ns", "x", nil)
	sas := e.store(t, "serviceaccounts")

	okCases := []struct {
		name string
		rv   string
	}{
		{"get with resourceVersion unset reads the latest state", ""},
		{"get with resourceVersion 0 reads local state", "0"},
		{"get with the object's resourceVersion is served", sa.ResourceVersion},
		{"get with an older resourceVersion is served (not older than)", "1"},
	}
	for _, tc := range okCases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sas.Get(e.in("ns"), "x", &metav1.GetOptions{ResourceVersion: tc.rv})
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*api.ServiceAccount)
			if got.UID != sa.UID || got.ResourceVersion != sa.ResourceVersion {
				t.Fatalf("got uid %s rv %s, want uid %s rv %s", got.UID, got.ResourceVersion, sa.UID, sa.ResourceVersion)
			}
		})
	}

	t.Run("get of a missing object is NotFound", func(t *testing.T) {
		_, err := sas.Get(e.in("ns"), "missing", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", `serviceaccounts "missing" not found`)
	})

	t.Run("get in another namespace does not see the object", func(t *testing.T) {
		_, err := sas.Get(e.in("default"), "x", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", "")
	})

	t.Run("get of a cluster-scoped object", func(t *testing.T) {
		out, err := e.store(t, "namespaces").Get(e.in(""), "kube-system", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out.(*api.Namespace).Name != "kube-system" {
			t.Fatalf("got %s", out.(*api.Namespace).Name)
		}
	})

	t.Run("get with a resourceVersion far in the future is 504 Too large resource version", func(t *testing.T) {
		future := e.applied() + 1_000_000
		_, err := sas.Get(e.in("ns"), "x", &metav1.GetOptions{ResourceVersion: strconv.FormatUint(future, 10)})
		wantTooLarge(t, err, future, e.applied())
	})

	t.Run("get with a resourceVersion written by a later write waits for it", func(t *testing.T) {
		y := e.sa(t, "ns", "y", nil)
		out, err := sas.Get(e.in("ns"), "y", &metav1.GetOptions{ResourceVersion: y.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		if out.(*api.ServiceAccount).UID != y.UID {
			t.Fatal("wrong object")
		}
	})

	t.Run("get with a malformed resourceVersion is BadRequest", func(t *testing.T) {
		_, err := sas.Get(e.in("ns"), "x", &metav1.GetOptions{ResourceVersion: "abc"})
		wantStatus(t, err, apierrors.IsBadRequest, "BadRequest", "")
	})
}

// mutate is an UpdatedObjectInfo that applies fn to a copy of the current
// object, with an empty resourceVersion (an unconditional update).
func mutate(fn func(sa *api.ServiceAccount)) rest.UpdatedObjectInfo {
	return rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		sa := old.DeepCopyObject().(*api.ServiceAccount)
		sa.ResourceVersion = ""
		fn(sa)
		return sa, nil
	})
}

func TestStoreUpdate(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := e.store(t, "serviceaccounts")
	get := func(t *testing.T, name string) *api.ServiceAccount {
		t.Helper()
		out, err := sas.Get(e.in("ns"), name, &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out.(*api.ServiceAccount)
	}

	t.Run("update with the current resourceVersion writes at a new log index", func(t *testing.T) {
		e.sa(t, "ns", "cur", nil)
		sa := get(t, "cur")
		sa.Labels = map[string]string{"a": "1"}
		out, err := sas.Update(e.in("ns"), "cur", rest.DefaultUpdatedObjectInfo(sa), false)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(*api.ServiceAccount)
		if rv := rvOf(t, got.ResourceVersion); rv <= rvOf(t, sa.ResourceVersion) || rv != e.applied() {
			t.Errorf("resourceVersion %s after %s, applied index %d", got.ResourceVersion, sa.ResourceVersion, e.applied())
		}
		if get(t, "cur").Labels["a"] != "1" {
			t.Error("label not stored")
		}
	})

	t.Run("update with a stale resourceVersion is Conflict", func(t *testing.T) {
		e.sa(t, "ns", "stale", nil)
		old := get(t, "stale")
		fresh := old.DeepCopy()
		fresh.Labels = map[string]string{"v": "2"}
		if _, err := sas.Update(e.in("ns"), "stale", rest.DefaultUpdatedObjectInfo(fresh), false); err != nil {
			t.Fatal(err)
		}
		old.Labels = map[string]string{"v": "stale"}
		before := e.applied()
		_, err := sas.Update(e.in("ns"), "stale", rest.DefaultUpdatedObjectInfo(old), false)
		wantStatus(t, err, apierrors.IsConflict, "Conflict",
			`Operation cannot be fulfilled on serviceaccounts "stale": the object has been modified; please apply your changes to the latest version and try again`)
		if e.applied() != before {
			t.Error("a conflicting update wrote to the log")
		}
		if get(t, "stale").Labels["v"] != "2" {
			t.Error("the stale update replaced the newer object")
		}
	})

	t.Run("update with an empty resourceVersion is unconditional and succeeds", func(t *testing.T) {
		e.sa(t, "ns", "uncond", nil)
		sa := get(t, "uncond")
		sa.Labels = map[string]string{"u": "1"}
		sa.ResourceVersion = ""
		out, err := sas.Update(e.in("ns"), "uncond", rest.DefaultUpdatedObjectInfo(sa), false)
		if err != nil {
			t.Fatal(err)
		}
		if rvOf(t, out.(*api.ServiceAccount).ResourceVersion) != e.applied() {
			t.Error("the returned resourceVersion is not the write's log index")
		}
		if get(t, "uncond").Labels["u"] != "1" {
			t.Error("label not stored")
		}
	})

	t.Run("update of an identical object is a no-op: same resourceVersion, nothing written", func(t *testing.T) {
		e.sa(t, "ns", "same", map[string]string{"k": "v"})
		sa := get(t, "same")
		before := e.applied()
		out, err := sas.Update(e.in("ns"), "same", rest.DefaultUpdatedObjectInfo(sa.DeepCopy()), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(*api.ServiceAccount).ResourceVersion; got != sa.ResourceVersion {
			t.Errorf("resourceVersion %s, want unchanged %s", got, sa.ResourceVersion)
		}
		if e.applied() != before {
			t.Errorf("a no-op update wrote to the log (applied %d -> %d)", before, e.applied())
		}
		if get(t, "same").ResourceVersion != sa.ResourceVersion {
			t.Error("stored resourceVersion changed")
		}
	})

	t.Run("an unconditional update that changes nothing is a no-op too", func(t *testing.T) {
		sa := get(t, "same")
		before := e.applied()
		out, err := sas.Update(e.in("ns"), "same", mutate(func(*api.ServiceAccount) {}), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(*api.ServiceAccount).ResourceVersion; got != sa.ResourceVersion {
			t.Errorf("resourceVersion %s, want unchanged %s", got, sa.ResourceVersion)
		}
		if e.applied() != before {
			t.Error("a no-op update wrote to the log")
		}
	})

	t.Run("dry-run update writes nothing and returns the updated object", func(t *testing.T) {
		sa := get(t, "cur")
		before := e.applied()
		out, err := sas.Update(e.in("ns"), "cur", mutate(func(sa *api.ServiceAccount) { sa.Labels["dry"] = "run" }), true)
		if err != nil {
			t.Fatal(err)
		}
		if out.(*api.ServiceAccount).Labels["dry"] != "run" {
			t.Error("the returned object lacks the change")
		}
		if e.applied() != before {
			t.Error("a dry-run update wrote to the log")
		}
		if got := get(t, "cur"); got.Labels["dry"] != "" || got.ResourceVersion != sa.ResourceVersion {
			t.Error("a dry-run update changed the stored object")
		}
	})

	t.Run("update of a missing object is NotFound", func(t *testing.T) {
		_, err := sas.Update(e.in("ns"), "missing", mutate(func(*api.ServiceAccount) {}), false)
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", `serviceaccounts "missing" not found`)
	})

	t.Run("update with a UID precondition that does not match is Conflict", func(t *testing.T) {
		e.sa(t, "ns", "pre", nil)
		sa := get(t, "pre")
		sa.UID = "not-the-uid"
		sa.Labels = map[string]string{"x": "y"}
		_, err := sas.Update(e.in("ns"), "pre", rest.DefaultUpdatedObjectInfo(sa), false)
		wantStatus(t, err, apierrors.IsConflict, "Conflict", "")
		if !strings.Contains(err.Error(), "Precondition failed: UID in precondition: not-the-uid") {
			t.Errorf("message = %q", err.Error())
		}
	})

	t.Run("update that changes metadata.uid is Invalid", func(t *testing.T) {
		before := e.applied()
		_, err := sas.Update(e.in("ns"), "pre", mutate(func(sa *api.ServiceAccount) { sa.UID = "other-uid" }), false)
		wantStatus(t, err, apierrors.IsInvalid, "Invalid", "")
		if e.applied() != before {
			t.Error("an invalid update wrote to the log")
		}
	})

	t.Run("update ignores a changed creationTimestamp, as kube-apiserver does", func(t *testing.T) {
		sa := get(t, "pre")
		created := sa.CreationTimestamp
		sa.CreationTimestamp = metav1.NewTime(created.Add(-time.Hour))
		sa.Labels = map[string]string{"touched": "yes"}
		out, err := sas.Update(e.in("ns"), "pre", rest.DefaultUpdatedObjectInfo(sa), false)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(*api.ServiceAccount).CreationTimestamp; got.Unix() != created.Unix() {
			t.Errorf("creationTimestamp %s, want the original %s", got, created)
		}
	})

	t.Run("concurrent unconditional updates from 20 goroutines all land", func(t *testing.T) {
		e.sa(t, "ns", "hot", nil)
		const n = 20
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := sas.Update(e.in("ns"), "hot", mutate(func(sa *api.ServiceAccount) {
					if sa.Labels == nil {
						sa.Labels = map[string]string{}
					}
					sa.Labels[fmt.Sprintf("writer-%d", i)] = "yes"
				}), false)
				errs <- err
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		got := get(t, "hot")
		if len(got.Labels) != n {
			t.Fatalf("%d labels, want %d: %v", len(got.Labels), n, got.Labels)
		}
		for i := 0; i < n; i++ {
			if got.Labels[fmt.Sprintf("writer-%d", i)] != "yes" {
				t.Errorf("writer-%d's label lost", i)
			}
		}
	})

	t.Run("removing the last finalizer of an object being deleted deletes it", func(t *testing.T) {
		e.sa(t, "ns", "fin", nil)
		if _, err := sas.Update(e.in("ns"), "fin", mutate(func(sa *api.ServiceAccount) {
			sa.Finalizers = []string{"example.com/hold"}
		}), false); err != nil {
			t.Fatal(err)
		}
		if _, done, err := sas.Delete(e.in("ns"), "fin", &metav1.DeleteOptions{}, false); err != nil || done {
			t.Fatalf("delete: done=%v err=%v", done, err)
		}
		if _, err := sas.Update(e.in("ns"), "fin", mutate(func(sa *api.ServiceAccount) {
			sa.Finalizers = nil
		}), false); err != nil {
			t.Fatal(err)
		}
		_, err := sas.Get(e.in("ns"), "fin", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", "")
	})
}

func TestStoreDelete(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := e.store(t, "serviceaccounts")
	secrets := e.store(t, "secrets")

	t.Run("delete of a serviceaccount returns the deleted object", func(t *testing.T) {
		sa := e.sa(t, "ns", "gone", nil)
		out, done, err := sas.Delete(e.in("ns"), "gone", &metav1.DeleteOptions{}, false)
		if err != nil || !done {
			t.Fatalf("done=%v err=%v", done, err)
		}
		got, ok := out.(*api.ServiceAccount)
		if !ok || got.UID != sa.UID {
			t.Fatalf("returned %T %+v, want the serviceaccount", out, out)
		}
		_, err = sas.Get(e.in("ns"), "gone", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", "")
		kv, _, _ := e.b.fsm.Get(fsm.Key{Resource: "serviceaccounts", Namespace: "ns", Name: "gone"}, 0)
		if kv != nil {
			t.Error("the fsm still holds the object")
		}
	})

	t.Run("delete of a secret returns a Success Status", func(t *testing.T) {
		out, err := secrets.Create(e.in("ns"), &api.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Type: api.SecretTypeOpaque}, false)
		if err != nil {
			t.Fatal(err)
		}
		uid := out.(*api.Secret).UID
		del, done, err := secrets.Delete(e.in("ns"), "s", &metav1.DeleteOptions{}, false)
		if err != nil || !done {
			t.Fatalf("done=%v err=%v", done, err)
		}
		st, ok := del.(*metav1.Status)
		if !ok {
			t.Fatalf("returned %T, want *metav1.Status", del)
		}
		want := &metav1.StatusDetails{Name: "s", Kind: "secrets", UID: uid}
		if st.Status != metav1.StatusSuccess || !reflect.DeepEqual(st.Details, want) {
			t.Errorf("status %q details %+v, want Success %+v", st.Status, st.Details, want)
		}
		_, err = secrets.Get(e.in("ns"), "s", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", "")
	})

	t.Run("dry-run delete writes nothing and leaves the object", func(t *testing.T) {
		e.sa(t, "ns", "dry", nil)
		before := e.applied()
		out, done, err := sas.Delete(e.in("ns"), "dry", &metav1.DeleteOptions{}, true)
		if err != nil || !done {
			t.Fatalf("done=%v err=%v", done, err)
		}
		if sa, ok := out.(*api.ServiceAccount); !ok || sa.Name != "dry" {
			t.Errorf("returned %T", out)
		}
		if e.applied() != before {
			t.Error("a dry-run delete wrote to the log")
		}
		if _, err := sas.Get(e.in("ns"), "dry", &metav1.GetOptions{}); err != nil {
			t.Errorf("the object is gone: %v", err)
		}
	})

	t.Run("delete of a missing object is NotFound", func(t *testing.T) {
		_, _, err := sas.Delete(e.in("ns"), "missing", &metav1.DeleteOptions{}, false)
		wantStatus(t, err, apierrors.IsNotFound, "NotFound", `serviceaccounts "missing" not found`)
	})

	pre := e.sa(t, "ns", "pre", nil)
	badUID := types.UID("not-the-uid")
	badRV := "1"
	goodUID, goodRV := pre.UID, pre.ResourceVersion
	preCases := []struct {
		name string
		pre  *metav1.Preconditions
		msg  string
	}{
		{
			// kube-apiserver's generic store checks DeleteOptions
			// preconditions in rest.BeforeDelete, which names the kind.
			name: "delete with a UID precondition that does not match is Conflict",
			pre:  &metav1.Preconditions{UID: &badUID},
			msg:  fmt.Sprintf(`Operation cannot be fulfilled on ServiceAccount "pre": the UID in the precondition (not-the-uid) does not match the UID in record (%s). The object might have been deleted and then recreated`, goodUID),
		},
		{
			name: "delete with a resourceVersion precondition that does not match is Conflict",
			pre:  &metav1.Preconditions{ResourceVersion: &badRV},
			msg:  fmt.Sprintf(`Operation cannot be fulfilled on ServiceAccount "pre": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (%s). The object might have been modified`, goodRV),
		},
	}
	for _, tc := range preCases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.applied()
			_, done, err := sas.Delete(e.in("ns"), "pre", &metav1.DeleteOptions{Preconditions: tc.pre}, false)
			wantStatus(t, err, apierrors.IsConflict, "Conflict", tc.msg)
			if done || e.applied() != before {
				t.Errorf("a failed precondition deleted or wrote (done=%v)", done)
			}
			if _, err := sas.Get(e.in("ns"), "pre", &metav1.GetOptions{}); err != nil {
				t.Errorf("the object is gone: %v", err)
			}
		})
	}

	t.Run("delete with matching UID and resourceVersion preconditions deletes", func(t *testing.T) {
		_, done, err := sas.Delete(e.in("ns"), "pre", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &goodUID, ResourceVersion: &goodRV}}, false)
		if err != nil || !done {
			t.Fatalf("done=%v err=%v", done, err)
		}
	})

	t.Run("delete of an object with finalizers only marks it and it stays readable", func(t *testing.T) {
		out, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: "held", Finalizers: []string{"example.com/hold"},
		}}, false)
		if err != nil {
			t.Fatal(err)
		}
		created := out.(*api.ServiceAccount)
		del, done, err := sas.Delete(e.in("ns"), "held", &metav1.DeleteOptions{}, false)
		if err != nil || done {
			t.Fatalf("done=%v err=%v, want a pending deletion", done, err)
		}
		marked := del.(*api.ServiceAccount)
		if marked.DeletionTimestamp == nil {
			t.Fatal("deletionTimestamp not set on the returned object")
		}
		if marked.DeletionGracePeriodSeconds == nil || *marked.DeletionGracePeriodSeconds != 0 {
			t.Errorf("deletionGracePeriodSeconds = %v, want 0", marked.DeletionGracePeriodSeconds)
		}
		if rvOf(t, marked.ResourceVersion) <= rvOf(t, created.ResourceVersion) {
			t.Error("marking did not write")
		}
		got, err := sas.Get(e.in("ns"), "held", &metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the marked object is not readable: %v", err)
		}
		g := got.(*api.ServiceAccount)
		if g.DeletionTimestamp == nil || !reflect.DeepEqual(g.Finalizers, []string{"example.com/hold"}) {
			t.Errorf("stored object: deletionTimestamp %v finalizers %v", g.DeletionTimestamp, g.Finalizers)
		}

		// A second delete of the marked object changes nothing.
		before := e.applied()
		again, done, err := sas.Delete(e.in("ns"), "held", &metav1.DeleteOptions{}, false)
		if err != nil || done {
			t.Fatalf("second delete: done=%v err=%v", done, err)
		}
		if e.applied() != before || again.(*api.ServiceAccount).ResourceVersion != g.ResourceVersion {
			t.Error("the second delete of a marked object wrote")
		}
	})

	t.Run("create of a name that is being deleted is AlreadyExists saying so", func(t *testing.T) {
		_, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "held"}}, false)
		wantStatus(t, err, apierrors.IsAlreadyExists, "AlreadyExists", `object is being deleted: serviceaccounts "held" already exists`)
	})

	t.Run("delete of a namespace marks it Terminating and is not done", func(t *testing.T) {
		e.namespace(t, "ending")
		out, done, err := e.store(t, "namespaces").Delete(e.in(""), "ending", &metav1.DeleteOptions{}, false)
		if err != nil || done {
			t.Fatalf("done=%v err=%v, want a pending deletion", done, err)
		}
		ns := out.(*api.Namespace)
		if ns.Status.Phase != api.NamespaceTerminating || ns.DeletionTimestamp == nil {
			t.Errorf("returned phase %q deletionTimestamp %v", ns.Status.Phase, ns.DeletionTimestamp)
		}
		got, err := e.store(t, "namespaces").Get(e.in(""), "ending", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g := got.(*api.Namespace)
		if g.Status.Phase != api.NamespaceTerminating || g.DeletionTimestamp == nil {
			t.Errorf("stored phase %q deletionTimestamp %v", g.Status.Phase, g.DeletionTimestamp)
		}
		if g.DeletionGracePeriodSeconds != nil {
			t.Errorf("deletionGracePeriodSeconds = %d, kube's namespace delete sets none", *g.DeletionGracePeriodSeconds)
		}
		if !reflect.DeepEqual(g.Spec.Finalizers, []api.FinalizerName{api.FinalizerKubernetes}) {
			t.Errorf("spec.finalizers = %v", g.Spec.Finalizers)
		}

		// Deleting a terminating namespace again answers it and writes nothing.
		before := e.applied()
		again, done, err := e.store(t, "namespaces").Delete(e.in(""), "ending", &metav1.DeleteOptions{}, false)
		if err != nil || done {
			t.Fatalf("second delete: done=%v err=%v", done, err)
		}
		if again.(*api.Namespace).ResourceVersion != g.ResourceVersion || e.applied() != before {
			t.Error("the second delete of a terminating namespace wrote")
		}
	})

	t.Run("delete of a namespace with a UID precondition that does not match is Conflict", func(t *testing.T) {
		nsObj := e.namespace(t, "guarded")
		before := e.applied()
		_, done, err := e.store(t, "namespaces").Delete(e.in(""), "guarded", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &badUID}}, false)
		wantStatus(t, err, apierrors.IsConflict, "Conflict", "")
		if done || e.applied() != before {
			t.Errorf("a failed precondition deleted or wrote (done=%v)", done)
		}
		// kube's namespace REST checks the preconditions itself, with the
		// storage layer's wording and the resource name.
		want := fmt.Sprintf(`Operation cannot be fulfilled on namespaces "guarded": Precondition failed: UID in precondition: not-the-uid, UID in object meta: %s`, nsObj.UID)
		if err.Error() != want {
			t.Fatalf("namespace precondition failure: %q, want kube's namespace REST wording %q", err.Error(), want)
		}
	})
}

func names(t *testing.T, obj runtime.Object) []string {
	t.Helper()
	l, ok := obj.(*api.ServiceAccountList)
	if !ok {
		t.Fatalf("list is %T", obj)
	}
	out := []string{}
	for _, it := range l.Items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return out
}

func mustLabels(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func mustFields(t *testing.T, s string) fields.Selector {
	t.Helper()
	sel, err := fields.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestStoreList(t *testing.T) {
	e := newEnv(t)
	sas := e.store(t, "serviceaccounts")
	// "ns-a/a" sorts before "ns/z" as a plain string; kube orders by
	// namespace first, so every object of "ns" comes first.
	e.namespace(t, "ns")
	e.namespace(t, "ns-a")
	e.sa(t, "ns", "z", map[string]string{"tier": "back"})
	e.sa(t, "ns-a", "a", map[string]string{"tier": "front"})
	e.sa(t, "ns", "b", map[string]string{"tier": "front"})
	e.sa(t, "ns-a", "b", nil)

	cases := []struct {
		name string
		ns   string
		opts metainternalversion.ListOptions
		want []string
	}{
		{
			name: "list orders by namespace then name: ns before ns-a",
			ns:   "",
			want: []string{"ns/b", "ns/z", "ns-a/a", "ns-a/b"},
		},
		{
			name: "list in a namespace returns only that namespace",
			ns:   "ns",
			want: []string{"ns/b", "ns/z"},
		},
		{
			name: "list in the namespace ns does not include ns-a",
			ns:   "ns-a",
			want: []string{"ns-a/a", "ns-a/b"},
		},
		{
			name: "label selector selects across all namespaces",
			opts: metainternalversion.ListOptions{LabelSelector: mustLabels(t, "tier=front")},
			want: []string{"ns/b", "ns-a/a"},
		},
		{
			name: "label existence selector",
			ns:   "ns-a",
			opts: metainternalversion.ListOptions{LabelSelector: mustLabels(t, "!tier")},
			want: []string{"ns-a/b"},
		},
		{
			name: "field selector on metadata.name",
			opts: metainternalversion.ListOptions{FieldSelector: mustFields(t, "metadata.name=b")},
			want: []string{"ns/b", "ns-a/b"},
		},
		{
			name: "field selector on metadata.namespace",
			opts: metainternalversion.ListOptions{FieldSelector: mustFields(t, "metadata.namespace=ns-a")},
			want: []string{"ns-a/a", "ns-a/b"},
		},
		{
			name: "label and field selectors both apply",
			opts: metainternalversion.ListOptions{LabelSelector: mustLabels(t, "tier=front"), FieldSelector: mustFields(t, "metadata.name!=b")},
			want: []string{"ns-a/a"},
		},
		{
			name: "list of an empty namespace is empty",
			ns:   "default",
			want: []string{},
		},
		{
			name: "list with resourceVersion 0 is served locally",
			opts: metainternalversion.ListOptions{ResourceVersion: "0"},
			want: []string{"ns/b", "ns/z", "ns-a/a", "ns-a/b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			out, err := sas.List(e.in(tc.ns), &opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(t, out); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			l := out.(*api.ServiceAccountList)
			if rvOf(t, l.ResourceVersion) != e.applied() {
				t.Errorf("list resourceVersion %s, applied index %d", l.ResourceVersion, e.applied())
			}
			if l.Continue != "" || l.RemainingItemCount != nil {
				t.Errorf("unpaged list has continue %q remaining %v", l.Continue, l.RemainingItemCount)
			}
		})
	}

	t.Run("list of a cluster-scoped resource", func(t *testing.T) {
		out, err := e.store(t, "namespaces").List(e.in(""), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range out.(*api.NamespaceList).Items {
			got = append(got, it.Name)
		}
		want := []string{"default", "kube-public", "kube-system", "ns", "ns-a"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})

	t.Run("list with a resourceVersion far in the future is 504", func(t *testing.T) {
		future := e.applied() + 1_000_000
		_, err := sas.List(e.in(""), &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(future, 10)})
		wantTooLarge(t, err, future, e.applied())
	})

	// Paging.
	e.namespace(t, "page")
	for i := 0; i < 7; i++ {
		lbl := map[string]string{"pg": "yes"}
		if i%3 == 1 {
			lbl = map[string]string{"pg": "no"}
		}
		e.sa(t, "page", fmt.Sprintf("p%d", i), lbl)
	}
	all := []string{"page/p0", "page/p1", "page/p2", "page/p3", "page/p4", "page/p5", "page/p6"}
	selected := []string{"page/p0", "page/p2", "page/p3", "page/p5", "page/p6"}

	pageCases := []struct {
		name  string
		limit int64
		label string
		field string
		want  []string
	}{
		{name: "paging by 3 returns every item once", limit: 3, want: all},
		{name: "paging by 1 returns every item once", limit: 1, want: all},
		{name: "paging by exactly the item count is one page", limit: 7, want: all},
		{name: "paging by more than the item count is one page", limit: 100, want: all},
		{name: "paging with a label selector returns every selected item once", limit: 2, label: "pg=yes", want: selected},
		{name: "paging with a field selector returns every selected item once", limit: 2, field: "metadata.name!=p4", want: []string{"page/p0", "page/p1", "page/p2", "page/p3", "page/p5", "page/p6"}},
	}
	for _, tc := range pageCases {
		t.Run(tc.name, func(t *testing.T) {
			opts := metainternalversion.ListOptions{Limit: tc.limit}
			filtered := tc.label != "" || tc.field != ""
			if tc.label != "" {
				opts.LabelSelector = mustLabels(t, tc.label)
			}
			if tc.field != "" {
				opts.FieldSelector = mustFields(t, tc.field)
			}
			var got []string
			listRV := ""
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatal("paging does not end")
				}
				out, err := sas.List(e.in("page"), &opts)
				if err != nil {
					t.Fatal(err)
				}
				l := out.(*api.ServiceAccountList)
				page := names(t, out)
				if int64(len(page)) > tc.limit {
					t.Fatalf("page of %d items over limit %d", len(page), tc.limit)
				}
				got = append(got, page...)
				if listRV == "" {
					listRV = l.ResourceVersion
				} else if l.ResourceVersion != listRV {
					t.Errorf("page %d has resourceVersion %s, first page %s", pages, l.ResourceVersion, listRV)
				}
				last := l.Continue == ""
				switch {
				case last && l.RemainingItemCount != nil:
					t.Errorf("last page has remainingItemCount %d", *l.RemainingItemCount)
				case !last && filtered && l.RemainingItemCount != nil:
					t.Errorf("page %d with a selector has remainingItemCount %d, want none", pages, *l.RemainingItemCount)
				case !last && !filtered:
					wantLeft := int64(len(tc.want) - len(got))
					if l.RemainingItemCount == nil || *l.RemainingItemCount != wantLeft {
						t.Errorf("page %d remainingItemCount %v, want %d", pages, l.RemainingItemCount, wantLeft)
					}
				}
				if last {
					break
				}
				opts.Continue = l.Continue
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("paged through %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("later pages come from the first page's revision despite writes between pages", func(t *testing.T) {
		opts := metainternalversion.ListOptions{Limit: 3}
		out, err := sas.List(e.in("page"), &opts)
		if err != nil {
			t.Fatal(err)
		}
		first := out.(*api.ServiceAccountList)
		wantRest := map[string]string{} // name -> resourceVersion at the first page's revision
		for _, n := range []string{"p3", "p4", "p5", "p6"} {
			o, err := sas.Get(e.in("page"), n, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantRest[n] = o.(*api.ServiceAccount).ResourceVersion
		}
		// Between pages: a new object in the not-yet-listed range, an
		// update and a delete of objects still to come.
		e.sa(t, "page", "p35", nil)
		if _, err := sas.Update(e.in("page"), "p4", mutate(func(sa *api.ServiceAccount) { sa.Labels["changed"] = "yes" }), false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sas.Delete(e.in("page"), "p5", &metav1.DeleteOptions{}, false); err != nil {
			t.Fatal(err)
		}
		var rest []api.ServiceAccount
		opts.Continue = first.Continue
		for opts.Continue != "" {
			out, err := sas.List(e.in("page"), &opts)
			if err != nil {
				t.Fatal(err)
			}
			l := out.(*api.ServiceAccountList)
			if l.ResourceVersion != first.ResourceVersion {
				t.Errorf("later page resourceVersion %s, first page %s", l.ResourceVersion, first.ResourceVersion)
			}
			rest = append(rest, l.Items...)
			opts.Continue = l.Continue
		}
		var got []string
		for _, it := range rest {
			got = append(got, it.Name)
			if it.ResourceVersion != wantRest[it.Name] {
				t.Errorf("%s has resourceVersion %s, want %s from the first page's revision", it.Name, it.ResourceVersion, wantRest[it.Name])
			}
			if it.Labels["changed"] != "" {
				t.Errorf("%s shows a write made after the first page", it.Name)
			}
		}
		if want := []string{"p3", "p4", "p5", "p6"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("later pages %v, want %v", got, want)
		}
		// A fresh list sees the writes.
		out, err = sas.List(e.in("page"), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, out), []string{"page/p0", "page/p1", "page/p2", "page/p3", "page/p35", "page/p4", "page/p6"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("fresh list %v, want %v", got, want)
		}
	})

	t.Run("list with resourceVersion and limit is an exact snapshot at that revision", func(t *testing.T) {
		out, err := sas.List(e.in("ns"), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		at := out.(*api.ServiceAccountList).ResourceVersion
		e.sa(t, "ns", "later", nil)
		out, err = sas.List(e.in("ns"), &metainternalversion.ListOptions{ResourceVersion: at, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, out), []string{"ns/b", "ns/z"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("exact list %v, want %v", got, want)
		}
		if out.(*api.ServiceAccountList).ResourceVersion != at {
			t.Errorf("exact list resourceVersion %s, want %s", out.(*api.ServiceAccountList).ResourceVersion, at)
		}

		// Legacy exact match: resourceVersion with a limit and no match.
		out, err = sas.List(e.in("ns"), &metainternalversion.ListOptions{ResourceVersion: at, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, out), []string{"ns/b", "ns/z"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("legacy exact list %v, want %v", got, want)
		}

		// NotOlderThan: the latest state, at least as new as at.
		out, err = sas.List(e.in("ns"), &metainternalversion.ListOptions{ResourceVersion: at, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, out), []string{"ns/b", "ns/later", "ns/z"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("not-older-than list %v, want %v", got, want)
		}
		if rvOf(t, out.(*api.ServiceAccountList).ResourceVersion) <= rvOf(t, at) {
			t.Errorf("not-older-than list resourceVersion %s, want newer than %s", out.(*api.ServiceAccountList).ResourceVersion, at)
		}
	})

	t.Run("field selectors use the resource's own selectable fields", func(t *testing.T) {
		secrets := e.store(t, "secrets")
		for name, typ := range map[string]api.SecretType{"plain": api.SecretTypeOpaque, "custom": "example.com/custom"} {
			if _, err := secrets.Create(e.in("ns"), &api.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ}, false); err != nil {
				t.Fatal(err)
			}
		}
		out, err := secrets.List(e.in("ns"), &metainternalversion.ListOptions{FieldSelector: mustFields(t, "type=example.com/custom")})
		if err != nil {
			t.Fatal(err)
		}
		if l := out.(*api.SecretList); len(l.Items) != 1 || l.Items[0].Name != "custom" {
			t.Fatalf("got %+v", l.Items)
		}
		if _, _, err := e.store(t, "namespaces").Delete(e.in(""), "ns-a", &metav1.DeleteOptions{}, false); err != nil {
			t.Fatal(err)
		}
		out, err = e.store(t, "namespaces").List(e.in(""), &metainternalversion.ListOptions{FieldSelector: mustFields(t, "status.phase=Terminating")})
		if err != nil {
			t.Fatal(err)
		}
		if l := out.(*api.NamespaceList); len(l.Items) != 1 || l.Items[0].Name != "ns-a" {
			t.Fatalf("terminating namespaces %+v", l.Items)
		}
	})

	t.Run("an exact list at a compacted revision is 410 Expired", func(t *testing.T) {
		out, err := sas.List(e.in("ns"), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old := out.(*api.ServiceAccountList).ResourceVersion
		e.sa(t, "ns", "after-old", nil)
		e.compact(t)
		_, err = sas.List(e.in("ns"), &metainternalversion.ListOptions{ResourceVersion: old, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		wantStatus(t, err, apierrors.IsResourceExpired, "Expired (410)", "The resourceVersion for the provided list is too old.")
		if c := statusCode(err); c != 410 {
			t.Errorf("code %d, want 410", c)
		}
	})

	t.Run("a continue token from a compacted revision is 410 Expired", func(t *testing.T) {
		first, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		token := first.(*api.ServiceAccountList).Continue
		e.sa(t, "page", "p9", nil)
		e.compact(t)
		_, err = sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: token})
		wantStatus(t, err, apierrors.IsResourceExpired, "Expired (410)", "")
		if c := statusCode(err); c != 410 {
			t.Errorf("code %d, want 410", c)
		}
		// kube-apiserver (etcd3 handleCompactedErrorForPaging) answers with
		// its "inconsistent continue" message and a token to continue at
		// the latest revision in the Status' metadata.continue.
		const inconsistentContinue = "The provided continue parameter is too old " +
			"to display a consistent list result. You can start a new list without " +
			"the continue parameter, or use the continue token in this response to " +
			"retrieve the remainder of the results. Continuing with the provided " +
			"token results in an inconsistent list - objects that were created, " +
			"modified, or deleted between the time the first chunk was returned " +
			"and now may show up in the list."
		st := err.(apierrors.APIStatus).Status()
		if st.Message != inconsistentContinue || st.ListMeta.Continue == "" {
			t.Fatalf("expired continue token: %q (token %q), want %q with a continue token for the latest revision", st.Message, st.ListMeta.Continue, inconsistentContinue)
		}
		// The replacement token continues after the same key, at the
		// latest revision.
		rest, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 100, Continue: st.ListMeta.Continue})
		if err != nil {
			t.Fatalf("continuing with the replacement token: %v", err)
		}
		seen := map[string]bool{}
		for _, sa := range first.(*api.ServiceAccountList).Items {
			seen[sa.Name] = true
		}
		for _, sa := range rest.(*api.ServiceAccountList).Items {
			if seen[sa.Name] {
				t.Fatalf("the replacement token repeated %s from the first page", sa.Name)
			}
		}
	})

	t.Run("a continue token from a revision far in the future is 504 naming it", func(t *testing.T) {
		future := e.applied() + 1_000_000
		token := storage.EncodeContinue(future, "")
		_, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: token})
		wantStatus(t, err, apierrors.IsTimeout, "Timeout (504)", "")
		want := fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", future, e.applied())
		if err.Error() != want {
			t.Fatalf("not-yet-applied continue revision: %q, want %q after the bounded wait", err.Error(), want)
		}
	})

	t.Run("a continue token from a revision not yet applied here waits for it", func(t *testing.T) {
		// A continue token minted by a node further ahead: the list must
		// wait (bounded) until this node has applied its revision, as a
		// list at resourceVersion N does (DESIGN §5).
		sb := &waitSignal{testBackend: e.b, waiting: make(chan struct{})}
		patient := newRegistry(t, &storage.Config{FreshWait: 30 * time.Second}, sb, CoreResources()).Store(sas.GVR)
		token := storage.EncodeContinue(e.applied()+1, "")
		stop := make(chan struct{})
		wrote := make(chan error, 1)
		go func() {
			// Write the awaited revision once the list waits for it.
			select {
			case <-sb.waiting:
			case <-stop:
				wrote <- nil
				return
			}
			_, err := sas.Create(e.in("page"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "wait-for-me"}}, false)
			wrote <- err
		}()
		_, err := patient.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: token})
		close(stop)
		if werr := <-wrote; werr != nil {
			t.Fatal(werr)
		}
		if err != nil {
			t.Fatalf("a continue token for a revision not yet applied did not wait for it: %v", err)
		}
	})

	badTokens := []struct {
		name  string
		token string
	}{
		{"a continue token that is not base64 is BadRequest", "%%%not-base64%%%"},
		{"a continue token that is not JSON is BadRequest", base64.RawURLEncoding.EncodeToString([]byte("garbage"))},
		{"a continue token without version or revision is BadRequest", base64.RawURLEncoding.EncodeToString([]byte(`{}`))},
		{"a continue token of another version is BadRequest", base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v0","rv":5,"start":""}`))},
	}
	for _, tc := range badTokens {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: tc.token})
			wantStatus(t, err, apierrors.IsBadRequest, "BadRequest", "")
		})
	}

	t.Run("a continue token with a resourceVersion other than 0 is BadRequest", func(t *testing.T) {
		first, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		fl := first.(*api.ServiceAccountList)
		// kube-apiserver: storage.ValidateListOptions.
		_, err = sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: fl.Continue, ResourceVersion: fl.ResourceVersion})
		wantStatus(t, err, apierrors.IsBadRequest, "BadRequest", "specifying resource version is not allowed when using continue")
		// A broken token is reported first, as kube decodes it first.
		_, err = sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: "%%%", ResourceVersion: fl.ResourceVersion})
		wantStatus(t, err, apierrors.IsBadRequest, "BadRequest", "")
		if strings.Contains(err.Error(), "specifying resource version") {
			t.Fatalf("broken token with a resourceVersion: %v, want the token's error", err)
		}
		// "0" is tolerated and the token decides.
		for _, rv := range []string{"", "0"} {
			out, err := sas.List(e.in("page"), &metainternalversion.ListOptions{Limit: 2, Continue: fl.Continue, ResourceVersion: rv})
			if err != nil {
				t.Fatalf("continue with resourceVersion %q: %v", rv, err)
			}
			l := out.(*api.ServiceAccountList)
			if l.ResourceVersion != fl.ResourceVersion || len(l.Items) != 2 || l.Items[0].Name <= fl.Items[1].Name {
				t.Fatalf("continue with resourceVersion %q: rv %s items %v, want the second page at %s", rv, l.ResourceVersion, names(t, out), fl.ResourceVersion)
			}
		}
	})

	t.Run("a list at a resourceVersion that is not a number is BadRequest in kube's words", func(t *testing.T) {
		for _, opts := range []metainternalversion.ListOptions{
			{ResourceVersion: "abc"},
			{ResourceVersion: "abc", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
			{ResourceVersion: "abc", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 2},
		} {
			_, err := sas.List(e.in("page"), &opts)
			wantStatus(t, err, apierrors.IsBadRequest, "BadRequest",
				`invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`)
		}
	})

	t.Run("a list at resourceVersion 0 ignores limit, as kube's watch cache does", func(t *testing.T) {
		full, err := sas.List(e.in("page"), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := names(t, full)
		if len(want) < 3 {
			t.Fatalf("too few items to page: %v", want)
		}
		for _, match := range []metav1.ResourceVersionMatch{"", metav1.ResourceVersionMatchNotOlderThan} {
			out, err := sas.List(e.in("page"), &metainternalversion.ListOptions{ResourceVersion: "0", ResourceVersionMatch: match, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			l := out.(*api.ServiceAccountList)
			if got := names(t, out); !reflect.DeepEqual(got, want) || l.Continue != "" || l.RemainingItemCount != nil {
				t.Fatalf("match %q: got %v continue %q remaining %v, want all of %v on one page", match, got, l.Continue, l.RemainingItemCount, want)
			}
		}
		// Any other resourceVersion honours limit.
		out, err := sas.List(e.in("page"), &metainternalversion.ListOptions{ResourceVersion: full.(*api.ServiceAccountList).ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if l := out.(*api.ServiceAccountList); len(l.Items) != 2 || l.Continue == "" {
			t.Fatalf("not-older-than with limit 2: %d items, continue %q", len(l.Items), l.Continue)
		}
	})
}

func TestRegistryBootstrap(t *testing.T) {
	e := newEnv(t)
	svcs := e.store(t, "services")
	out, err := svcs.Get(e.in("default"), "kubernetes", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := out.(*api.Service)

	t.Run("bootstrap creates the default, kube-system and kube-public namespaces", func(t *testing.T) {
		for _, n := range []string{"default", "kube-system", "kube-public"} {
			if _, err := e.store(t, "namespaces").Get(e.in(""), n, &metav1.GetOptions{}); err != nil {
				t.Errorf("namespace %s: %v", n, err)
			}
		}
	})

	t.Run("bootstrap creates default/kubernetes pointing at the API", func(t *testing.T) {
		if svc.Spec.ClusterIP != "10.96.0.1" || len(svc.Spec.Ports) != 1 ||
			svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 6443 {
			t.Fatalf("service spec %+v", svc.Spec)
		}
		if svc.Labels["component"] != "apiserver" || svc.Labels["provider"] != "kubernetes" {
			t.Errorf("labels %v", svc.Labels)
		}
	})

	t.Run("bootstrap again is idempotent and changes no object", func(t *testing.T) {
		if err := e.reg.Bootstrap(e.in(""), net.ParseIP("10.96.0.1"), 6443); err != nil {
			t.Fatal(err)
		}
		out, err := svcs.Get(e.in("default"), "kubernetes", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if again := out.(*api.Service); again.UID != svc.UID || again.ResourceVersion != svc.ResourceVersion {
			t.Errorf("service rewritten: uid %s rv %s, was uid %s rv %s", again.UID, again.ResourceVersion, svc.UID, svc.ResourceVersion)
		}
	})
}

func TestStoreDeleteCollection(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "dc")
	e.namespace(t, "other")
	sas := e.store(t, "serviceaccounts")
	for i := 0; i < 5; i++ {
		lbl := map[string]string{"del": "no"}
		if i%2 == 0 {
			lbl["del"] = "yes"
		}
		e.sa(t, "dc", fmt.Sprintf("sa-%d", i), lbl)
	}
	e.sa(t, "other", "sa-0", map[string]string{"del": "yes"})

	t.Run("deletecollection with a label selector deletes exactly the selected objects and returns them", func(t *testing.T) {
		out, err := sas.DeleteCollection(e.in("dc"), &metainternalversion.ListOptions{LabelSelector: mustLabels(t, "del=yes")}, &metav1.DeleteOptions{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, out), []string{"dc/sa-0", "dc/sa-2", "dc/sa-4"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("returned %v, want %v", got, want)
		}
		left, err := sas.List(e.in(""), &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(t, left), []string{"dc/sa-1", "dc/sa-3", "other/sa-0"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("left %v, want %v", got, want)
		}
	})

	t.Run("deletecollection of secrets returns the secrets, not Statuses", func(t *testing.T) {
		secrets := e.store(t, "secrets")
		for _, n := range []string{"s1", "s2"} {
			if _, err := secrets.Create(e.in("dc"), &api.Secret{ObjectMeta: metav1.ObjectMeta{Name: n}, Type: api.SecretTypeOpaque}, false); err != nil {
				t.Fatal(err)
			}
		}
		out, err := secrets.DeleteCollection(e.in("dc"), &metainternalversion.ListOptions{}, &metav1.DeleteOptions{}, false)
		if err != nil {
			t.Fatal(err)
		}
		l, ok := out.(*api.SecretList)
		if !ok || len(l.Items) != 2 || l.Items[0].Name != "s1" || l.Items[1].Name != "s2" {
			t.Fatalf("returned %T %+v", out, out)
		}
	})

	t.Run("deletecollection matching nothing deletes nothing", func(t *testing.T) {
		before := e.applied()
		out, err := sas.DeleteCollection(e.in("dc"), &metainternalversion.ListOptions{LabelSelector: mustLabels(t, "del=never")}, &metav1.DeleteOptions{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(t, out); len(got) != 0 {
			t.Fatalf("returned %v", got)
		}
		if e.applied() != before {
			t.Error("wrote to the log")
		}
	})
}

func TestObjectsLargerThanMaxObjectBytesAreRefusedBeforeTheLog(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := newRegistry(t, &storage.Config{FreshWait: testFreshWait, MaxObjectBytes: 4 << 10}, e.b, CoreResources()).
		Store(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"})
	big := map[string]string{"big": strings.Repeat("x", 8<<10)}
	const msg = "Request entity too large: limit is 4096"

	t.Run("a create is 413 and proposes nothing", func(t *testing.T) {
		before := e.applied()
		_, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "huge", Annotations: big}}, false)
		wantStatus(t, err, apierrors.IsRequestEntityTooLargeError, "413", msg)
		if e.applied() != before {
			t.Fatalf("applied index moved from %d to %d: the object reached the log", before, e.applied())
		}
	})
	t.Run("an update that grows an object past the bound is 413 and keeps it", func(t *testing.T) {
		cur := e.sa(t, "ns", "grows", nil)
		before := e.applied()
		_, err := sas.Update(e.in("ns"), "grows", mutate(func(sa *api.ServiceAccount) { sa.Annotations = big }), false)
		wantStatus(t, err, apierrors.IsRequestEntityTooLargeError, "413", msg)
		if e.applied() != before {
			t.Fatalf("applied index moved from %d to %d", before, e.applied())
		}
		got, err := sas.Get(e.in("ns"), "grows", &metav1.GetOptions{})
		if err != nil || got.(*api.ServiceAccount).ResourceVersion != cur.ResourceVersion {
			t.Fatalf("object changed: %v %v", got, err)
		}
	})
	t.Run("an object at the bound is stored", func(t *testing.T) {
		if _, err := sas.Create(e.in("ns"), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fits",
			Annotations: map[string]string{"a": strings.Repeat("x", 3<<10)}}}, false); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTooLargeManagedFieldsAreDroppedExceptForApply(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := newRegistry(t, &storage.Config{FreshWait: testFreshWait, MaxObjectBytes: 4 << 10}, e.b, CoreResources()).
		Store(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"})
	withFields := func(name string) *api.ServiceAccount {
		return &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:` + strings.Repeat("x", 8<<10) + `":{}}}}`)},
		}}}}
	}
	t.Run("a create that fits without its managedFields is stored without them, as kube retries", func(t *testing.T) {
		out, err := sas.Create(e.in("ns"), withFields("dropped"), false)
		if err != nil {
			t.Fatal(err)
		}
		if mf := out.(*api.ServiceAccount).ManagedFields; len(mf) != 0 {
			t.Fatalf("managedFields kept: %d entries", len(mf))
		}
	})
	t.Run("server-side apply keeps its managedFields or fails", func(t *testing.T) {
		_, err := sas.Create(storage.WithManagedFieldsKept(e.in("ns")), withFields("applied"), false)
		wantStatus(t, err, apierrors.IsRequestEntityTooLargeError, "413", "Request entity too large: limit is 4096")
	})
}

// newRegistry builds the storage layer over b with cfg (nil: defaults)
// and the registry of resources on it, without admission plugins.
func newRegistry(t testing.TB, cfg *storage.Config, b storage.Backend, resources []*Resource) *Registry {
	t.Helper()
	stor, err := storage.New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	return New(stor, resources, nil)
}
