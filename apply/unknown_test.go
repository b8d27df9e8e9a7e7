package apply

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestUnknownFieldsArePruned(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		unknown []string
		pruned  bool
		after   string
	}{
		{name: "nothing unknown", body: `{"kind":"Role","rules":[{"verbs":["get"]}]}`,
			pruned: true, after: `{"kind":"Role","rules":[{"verbs":["get"]}]}`},
		{name: "top level and in metadata", body: `{"kind":"Role","foo":1,"metadata":{"name":"r","bar":{"x":1}}}`,
			unknown: []string{"foo", "metadata.bar"}, pruned: true, after: `{"kind":"Role","metadata":{"name":"r"}}`},
		{name: "inside a list item", body: `{"kind":"Role","rules":[{"verbs":["get"]},{"verbs":["list"],"foo":1}]}`,
			unknown: []string{"rules[1].foo"}, pruned: true, after: `{"kind":"Role","rules":[{"verbs":["get"]},{"verbs":["list"]}]}`},
		{name: "a name with a dot cannot be found by its path", body: `{"kind":"Role","a.b":1}`,
			unknown: []string{"a.b"}, pruned: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeApplyPatch([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			unknown, err := p.UnknownFields(&rbacv1.Role{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(unknown, tc.unknown) {
				t.Fatalf("unknown %q, want %q", unknown, tc.unknown)
			}
			if got := p.PruneFields(unknown); got != tc.pruned {
				t.Fatalf("pruned %v, want %v", got, tc.pruned)
			}
			if !tc.pruned {
				return
			}
			want, err := DecodeApplyPatch([]byte(tc.after))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Object.Object, want.Object.Object) {
				t.Fatalf("after pruning %v, want %v", p.Object.Object, want.Object.Object)
			}
		})
	}
	t.Run("a value of the wrong type is an error", func(t *testing.T) {
		p, err := DecodeApplyPatch([]byte(`{"kind":"Role","rules":5}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.UnknownFields(&rbacv1.Role{}); err == nil {
			t.Fatal("no error")
		}
	})
}
