package registry

import (
	"encoding/base64"
	"strings"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
)

// FuzzContinueToken lists with a client's continue token
// (storage.DecodeContinue, ListStart and the paged fsm read behind it) on a
// single-node raft cluster. Whatever the token says (revision, start key, "latest"), the
// list answers a Status error or items of the namespace and resource asked
// for only: a start key naming another namespace must not leak it. A token
// that decodes encodes back to itself.
func FuzzContinueToken(f *testing.F) {
	e := newEnv(f)
	sas := e.reg.Store(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"})
	for _, ns := range []string{"a", "b"} {
		if _, err := e.reg.Store(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(e.in(""), &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, false); err != nil {
			f.Fatal(err)
		}
		for _, name := range []string{"x", "y", "z"} {
			if _, err := sas.Create(e.in(ns), &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, false); err != nil {
				f.Fatal(err)
			}
		}
	}
	first, err := sas.List(e.in("a"), &metainternalversion.ListOptions{Limit: 1})
	if err != nil {
		f.Fatal(err)
	}
	tok := first.(*api.ServiceAccountList).Continue
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, s := range []string{
		tok,
		storage.EncodeContinue(0, "/serviceaccounts/a/x"),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"/serviceaccounts/b/"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"/serviceaccounts/"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"/secrets/a/x"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":3,"start":"/serviceaccounts/a/\uffff"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":18446744073709551615,"start":""}`),
		raw(`{"v":"meta.k8s.io/v1","rv":1,"start":"","latest":true}`),
		raw(`{"v":"meta.k8s.io/v1","rv":1.5,"start":null}`),
		raw(`{"v":"meta.k8s.io/v1","rv":1,"rv":2,"start":"/serviceaccounts/a/x"}`),
		raw(`{"v":"meta.k8s.io/v1","rv":0}`),
		raw(`{"v":"meta.k8s.io/v2","rv":1}`),
		raw(strings.Repeat("[", 10000)),
		raw("\xff"),
		tok + "==",
		"%%%",
		"",
	} {
		f.Add(s, "a", "2", int64(1))
		f.Add(s, "", "", int64(0))
	}
	f.Fuzz(func(t *testing.T, token, ns, rv string, limit int64) {
		if rev, start, err := storage.DecodeContinue(token); err == nil {
			if r2, s2, err := storage.DecodeContinue(storage.EncodeContinue(rev, start)); err != nil || r2 != rev || s2 != start {
				t.Fatalf("token %q: (%d, %q) encodes to (%d, %q, %v)", token, rev, start, r2, s2, err)
			}
		}
		if token == "" {
			return // not a continuation
		}
		out, err := sas.List(e.in(ns), &metainternalversion.ListOptions{Continue: token, ResourceVersion: rv, Limit: limit})
		if err != nil {
			if statusCode(err) == 0 || statusCode(err) >= 500 && statusCode(err) != 504 {
				t.Fatalf("token %q: error %v is not a client Status", token, err)
			}
			return
		}
		for _, it := range out.(*api.ServiceAccountList).Items {
			if ns != "" && it.Namespace != ns {
				t.Fatalf("token %q: a list of namespace %q returned %s/%s", token, ns, it.Namespace, it.Name)
			}
		}
	})
}
