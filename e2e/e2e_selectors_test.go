package e2e_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestSelectors: equality- and set-based label selectors and field
// selectors work on list, watch and deletecollection; an unsupported field
// label is 400.
func TestSelectors(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sel"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps("sel")
	for name, tier := range map[string]string{"a": "web", "b": "db", "c": "cache", "d": ""} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if tier != "" {
			cm.Labels = map[string]string{"tier": tier}
		}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(l *corev1.ConfigMapList) string {
		var out []string
		for _, cm := range l.Items {
			if cm.Name != "kube-root-ca.crt" { // the root CA publisher's, in every namespace
				out = append(out, cm.Name)
			}
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ label, field, want string }{
		{"tier=web", "", "a"},
		{"tier!=web", "", "b,c,d"},
		{"tier in (web,db)", "", "a,b"},
		{"tier notin (web,db)", "", "c,d"},
		{"tier", "", "a,b,c"},
		{"!tier", "", "d"},
		{"", "metadata.name=c", "c"},
		{"", "metadata.name!=c,metadata.namespace=sel", "a,b,d"},
		{"tier in (web,db)", "metadata.name=b", "b"},
	} {
		l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: tc.label, FieldSelector: tc.field})
		if err != nil {
			t.Fatalf("list %q %q: %v", tc.label, tc.field, err)
		}
		if got := names(l); got != tc.want {
			t.Errorf("list label %q field %q = %s, want %s", tc.label, tc.field, got, tc.want)
		}
	}

	// Watch with a set-based label selector and a field selector.
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "tier in (web,db)", FieldSelector: "metadata.name!=a"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := nextEvent(t, w)
	if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "b" {
		t.Fatalf("initial event %s %v, want ADDED b only", ev.Type, ev.Object)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e", Labels: map[string]string{"tier": "db"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, w)
	if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "e" {
		t.Fatalf("event %s %v, want ADDED e", ev.Type, ev.Object)
	}

	// Deletecollection with both kinds of selector deletes exactly those.
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "tier notin (db)", FieldSelector: "metadata.name!=d"}); err != nil {
		t.Fatal(err)
	}
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(l); got != "b,d,e" {
		t.Fatalf("after deletecollection: %s, want b,d,e", got)
	}

	// An unsupported field label is 400 on list and watch.
	for _, watchToo := range []bool{false, true} {
		st := rawStatus(t, n, "/api/v1/namespaces/sel/configmaps?fieldSelector=spec.nope%3Dx&watch="+map[bool]string{false: "false", true: "true"}[watchToo])
		if st.Code != 400 || !strings.Contains(st.Message, `"spec.nope" is not a known field selector`) {
			t.Fatalf("unsupported field label (watch=%v): %+v", watchToo, st)
		}
	}
}
