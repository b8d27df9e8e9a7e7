package authn_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// localLog is the real fsm behind a one-voter "raft": Propose applies the
// command at the next index. It is what a single node's cluster does,
// without the network and the disk.
type localLog struct {
	mu    sync.Mutex
	f     *fsm.FSM
	index uint64
}

func newLocalLog() *localLog { return &localLog{f: fsm.New()} }

func (l *localLog) Propose(_ context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	res, ok := l.f.Apply(&raft.Log{Index: l.index, Term: 1, Type: raft.LogCommand, Data: cmd.Encode()}).(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("entry %d: no result", l.index)
	}
	return res, nil
}
func (l *localLog) ReadIndex(context.Context) (uint64, error) { return l.f.AppliedIndex(), nil }
func (l *localLog) AppliedIndex() uint64                      { return l.f.AppliedIndex() }
func (l *localLog) WaitApplied(ctx context.Context, index uint64) error {
	return l.f.WaitApplied(ctx, index)
}
func (l *localLog) Get(key fsm.Key, rev uint64) (*fsm.KV, uint64, error) { return l.f.Get(key, rev) }
func (l *localLog) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	return l.f.List(p, opts)
}

// world is one node's identity side over a real fsm and registry.
type world struct {
	t    testing.TB
	log  *localLog
	reg  *registry.Registry
	keys *authn.KeyStore
	id   *authn.Identity
}

func newWorld(t testing.TB, mutate func(*authn.Config)) *world {
	t.Helper()
	return newWorldKeyed(t, true, mutate)
}

// newWorldKeyed is newWorld; withKey false leaves the node without a
// signing key, as a cluster still bootstrapping.
func newWorldKeyed(t testing.TB, withKey bool, mutate func(*authn.Config)) *world {
	t.Helper()
	l := newLocalLog()
	stor, err := storage.New(nil, l)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(stor, registry.CoreResources(), nil)
	if err := reg.Bootstrap(context.Background(), net.ParseIP("10.96.0.1"), 6443); err != nil {
		t.Fatal(err)
	}
	keys := authn.NewKeyStore(l, l.f, storage.AtRest{})
	if withKey {
		if err := keys.EnsureKey(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := authn.DefaultConfig()
	cfg.CacheTTL = 0 // every answer is computed: these tests check the validators
	cfg.ExternalAddress = "127.0.0.1:6443"
	if mutate != nil {
		mutate(cfg)
	}
	id, err := authn.New(cfg, keys, reg)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, log: l, reg: reg, keys: keys, id: id}
}

func nsCtx(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

// create stores obj (an internal object) in namespace ns.
func (w *world) create(ns string, obj runtime.Object) runtime.Object {
	w.t.Helper()
	gvr := schema.GroupVersionResource{Version: "v1"}
	switch obj.(type) {
	case *api.ServiceAccount:
		gvr.Resource = "serviceaccounts"
	case *api.Pod:
		gvr.Resource = "pods"
	case *api.Secret:
		gvr.Resource = "secrets"
	default:
		w.t.Fatalf("create %T", obj)
	}
	out, err := w.reg.Store(gvr).Create(nsCtx(ns), obj, false)
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

func (w *world) delete(ns, resource, name string) {
	w.t.Helper()
	if _, _, err := w.reg.Store(schema.GroupVersionResource{Version: "v1", Resource: resource}).Delete(nsCtx(ns), name, &metav1.DeleteOptions{}, false); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) serviceAccount(ns, name string) *api.ServiceAccount {
	return w.create(ns, &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}).(*api.ServiceAccount)
}

// authenticate presents token as a bearer credential, optionally asking
// for audiences, and returns the answer.
func (w *world) authenticate(token string, auds ...string) (*authenticator.Response, bool, error) {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if len(auds) > 0 {
		req = req.WithContext(authenticator.WithAudiences(req.Context(), auds))
	}
	return w.id.Authenticator.AuthenticateRequest(req)
}

// getSecret reads a Secret from the registry.
func (w *world) getSecret(ns, name string) *api.Secret {
	w.t.Helper()
	obj, err := w.reg.Store(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Get(nsCtx(ns), name, &metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return obj.(*api.Secret)
}
