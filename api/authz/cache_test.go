package authz

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/fsm"
)

// TestCacheDecodesWithTheStoreCodecOnly: only what the RBAC stores write
// (protobuf through their codec, of the kind the key's resource holds) is
// a grant. Anything else placed under an RBAC key, as a writer that is not
// the RBAC store could place it, grants nothing, and the cache reports it
// by its key without quoting the value.
func TestCacheDecodesWithTheStoreCodecOnly(t *testing.T) {
	// marker is in every value and in no key: errors must not show it.
	const marker = "mallory-in-the-value"
	grant := clusterRoleBinding("grant", "cluster-admin", userSubject(marker))
	protobuf := func(obj runtime.Object) []byte {
		b, err := runtime.Encode(registry.StorageCodec(registry.RBACGroupVersion), obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	asJSON := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"evil"},` +
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},` +
		`"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"` + marker + `"}]}`
	asYAML := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: evil}\n" +
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
		"subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: " + marker + "}]\n"
	key := func(resource string) fsm.Key {
		return fsm.Key{Group: rbac.GroupName, Resource: resource, Name: "evil"}
	}
	cases := []struct {
		name   string
		key    fsm.Key
		value  []byte
		grants bool
	}{
		{"protobuf through the RBAC stores' codec is a grant", key("clusterrolebindings"), protobuf(grant), true},
		{"JSON is not a grant", key("clusterrolebindings"), []byte(asJSON), false},
		{"YAML is not a grant", key("clusterrolebindings"), []byte(asYAML), false},
		{"a ClusterRoleBinding under a ClusterRole's key is not a grant", key("clusterroles"), protobuf(grant), false},
		{"a ClusterRole under a ClusterRoleBinding's key is not a grant", key("clusterrolebindings"),
			protobuf(clusterRole(marker, rule([]string{"*"}, []string{"*"}, []string{"*"}))), false},
		{"protobuf without the codec's envelope is not a grant", key("clusterrolebindings"), protobuf(grant)[4:], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, true)
			mallory := authed(marker)
			deleteSecrets := resourceAttrs(mallory, "delete", "", "secrets", "", "kube-system", "")
			if allowed(t, w.authz, deleteSecrets) {
				t.Fatal("allowed before anything was stored")
			}
			if _, err := w.back.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: c.key, Value: c.value, UID: "uid-evil"}); err != nil {
				t.Fatal(err)
			}
			if got := allowed(t, w.authz, deleteSecrets); got != c.grants {
				t.Fatalf("allowed %v, want %v", got, c.grants)
			}
			errs := w.takeErrs()
			if c.grants {
				if len(errs) > 0 {
					t.Fatalf("errors for a valid object: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("%d errors reported, want 1: %v", len(errs), errs)
			}
			msg := errs[0].Error()
			if !strings.Contains(msg, c.key.Resource+` "evil"`) || strings.Contains(msg, marker) {
				t.Errorf("error %q: want the key named and the value not quoted", msg)
			}
			// A cache loading the same state leaves it out too.
			late, err := NewCache(w.back.f, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer late.Close()
			if allowed(t, New(late), deleteSecrets) {
				t.Fatal("a cache loading the state grants it")
			}
		})
	}
}
