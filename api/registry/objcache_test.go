package registry

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/fsm"
)

// TestObjectCacheCopies: objects from Get and decode are the caller's to
// modify; modifying them changes neither later reads nor list items, and
// lists and gets after an update show the new version.
func TestObjectCacheCopies(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := e.store(t, "serviceaccounts")
	e.sa(t, "ns", "a", map[string]string{"k": "v"})
	ctx := e.in("ns")

	if _, err := sas.List(ctx, &metainternalversion.ListOptions{}); err != nil { // fills the cache
		t.Fatal(err)
	}
	got, err := sas.Get(ctx, "a", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa := got.(*api.ServiceAccount)
	sa.Labels["k"] = "changed"
	sa.Name = "changed"
	sa.Secrets = append(sa.Secrets, api.ObjectReference{Name: "s"})

	again, err := sas.Get(ctx, "a", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := again.(*api.ServiceAccount); a.Labels["k"] != "v" || a.Name != "a" || len(a.Secrets) != 0 {
		t.Fatalf("a modified Get result leaked into the next Get: %+v", a.ObjectMeta)
	}
	list, err := sas.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := list.(*api.ServiceAccountList).Items
	if len(items) != 1 || items[0].Labels["k"] != "v" || items[0].Name != "a" {
		t.Fatalf("a modified Get result leaked into a list: %+v", items)
	}

	// An update is a new version: both reads show it.
	up, err := sas.Update(ctx, "a", mutate(func(sa *api.ServiceAccount) { sa.Labels["k"] = "w" }), false)
	if err != nil {
		t.Fatal(err)
	}
	list, err = sas.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items = list.(*api.ServiceAccountList).Items
	if len(items) != 1 || items[0].Labels["k"] != "w" || items[0].ResourceVersion != up.(*api.ServiceAccount).ResourceVersion {
		t.Fatalf("list after update: %+v", items)
	}
}

// TestObjectCacheMatchesDecode: every list item equals a fresh decode of
// its stored bytes, whether it came from the cache or not.
func TestObjectCacheMatchesDecode(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "ns")
	sas := e.store(t, "serviceaccounts")
	for i := 0; i < 20; i++ {
		e.sa(t, "ns", fmt.Sprintf("sa-%02d", i), map[string]string{"i": fmt.Sprint(i)})
	}
	ctx := e.in("ns")
	for round := 0; round < 2; round++ { // cold, then from the cache
		list, err := sas.List(ctx, &metainternalversion.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.b.List(sas.prefix(ctx), fsm.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		items := list.(*api.ServiceAccountList).Items
		if len(items) != len(res.KVs) {
			t.Fatalf("round %d: %d items, %d stored", round, len(items), len(res.KVs))
		}
		for i, kv := range res.KVs {
			want, _, err := StorageCodec(sas.GVR.GroupVersion()).Decode(kv.Value, nil, sas.NewFunc())
			if err != nil {
				t.Fatal(err)
			}
			want.(*api.ServiceAccount).ResourceVersion = fmt.Sprint(kv.ModRevision)
			if !apiequality.Semantic.DeepEqual(&items[i], want) {
				t.Fatalf("round %d: item %d differs from its decoded value:\n%+v\n%+v", round, i, items[i], want)
			}
		}
	}
}

// TestListBodyMatchesTheCodec: a list written from cached item encodings is
// byte for byte what kube's JSON and protobuf serializers write for the
// same list.
func TestListBodyMatchesTheCodec(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "wl")
	sas := e.store(t, "serviceaccounts")
	ctx := e.in("wl")
	for i := 0; i < 5; i++ {
		sa := &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("sa-%d", i),
			Labels:      map[string]string{"app": "x", "i": fmt.Sprint(i)},
			Annotations: map[string]string{"note": "<&> \"quoted\" ünïcode"},
		}, Secrets: []api.ObjectReference{{Name: "s1"}, {Name: "s2"}}}
		if i%2 == 0 {
			no := false
			sa.AutomountServiceAccountToken = &no
		}
		if _, err := sas.Create(ctx, sa, false); err != nil {
			t.Fatal(err)
		}
	}
	pods := e.store(t, "pods")
	// Defaulted as a request body is: v1, defaults, then the internal type.
	v1pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}
	Scheme.Default(v1pod)
	pod := &api.Pod{}
	if err := Scheme.Convert(v1pod, pod, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, pod, false); err != nil {
		t.Fatal(err)
	}
	// A list larger than one write of ListJSON.WriteTo (listChunk), with
	// one item larger than a write by itself.
	e.namespace(t, "wl-big")
	bigCtx := e.in("wl-big")
	for i := 0; i < 100; i++ {
		note := strings.Repeat("n", 1000+i)
		if i == 50 {
			note = strings.Repeat("N", listChunk+100)
		}
		sa := &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%03d", i), Annotations: map[string]string{"note": note}}}
		if _, err := sas.Create(bigCtx, sa, false); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		store *Store
		ctx   context.Context
		opts  *metainternalversion.ListOptions
	}{
		{"service accounts", sas, ctx, &metainternalversion.ListOptions{}},
		{"a list of several write chunks", sas, bigCtx, &metainternalversion.ListOptions{ResourceVersion: "0"}},
		{"a page with continue and remainingItemCount", sas, ctx, &metainternalversion.ListOptions{Limit: 2}},
		{"pods with kube's defaults", pods, ctx, &metainternalversion.ListOptions{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for pass := 0; pass < 2; pass++ { // the second pass reads cached JSON
				for _, mt := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
					got, want := listBodies(t, tc.store, tc.ctx, tc.opts, mt)
					if !bytes.Equal(got, want) {
						t.Fatalf("pass %d, %s:\n got %q\nwant %q", pass, mt, got, want)
					}
				}
			}
		})
	}
	// After an update the list shows the new version from a new cache entry.
	up, err := sas.Get(ctx, "sa-1", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	up.(*api.ServiceAccount).Labels["i"] = "changed"
	if _, err := sas.Update(ctx, "sa-1", rest.DefaultUpdatedObjectInfo(up), false); err != nil {
		t.Fatal(err)
	}
	for _, mt := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		got, want := listBodies(t, sas, ctx, &metainternalversion.ListOptions{}, mt)
		if !bytes.Equal(got, want) || !bytes.Contains(got, []byte("changed")) {
			t.Fatalf("after an update, %s:\n got %q\nwant %q", mt, got, want)
		}
	}
}

// listBodies returns a page of st's list written from cached item
// encodings, in chunks (ListBody.WriteTo), and as kube's codec writes the
// typed list, in JSON (mediaType runtime.ContentTypeJSON) or protobuf.
func listBodies(t *testing.T, st *Store, ctx context.Context, opts *metainternalversion.ListOptions, mediaType string) (got, want []byte) {
	t.Helper()
	page, err := st.ListPage(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if page.Len() == 0 {
		t.Fatal("the page is empty")
	}
	list, err := page.Object()
	if err != nil {
		t.Fatal(err)
	}
	info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	if want, err = runtime.Encode(Codecs.EncoderForVersion(info.Serializer, st.GVR.GroupVersion()), list); err != nil {
		t.Fatal(err)
	}
	body, err := page.JSON()
	if mediaType == runtime.ContentTypeProtobuf {
		body, err = page.Protobuf()
	}
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := body.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) || buf.Len() != body.Size() {
		t.Fatalf("WriteTo reported %d bytes and Size %d; wrote %d", n, body.Size(), buf.Len())
	}
	return buf.Bytes(), want
}
