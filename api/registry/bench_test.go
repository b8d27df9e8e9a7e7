package registry

import (
	"context"
	"fmt"
	"io"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/internal/memlog"
)

// benchEnv is a bootstrapped registry over a benchLog with namespace "ns"
// holding n ServiceAccounts.
func benchEnv(b *testing.B, n int) (*Store, context.Context) {
	b.Helper()
	reg := newRegistry(b, nil, memlog.New(), CoreResources())
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "bench", Groups: []string{user.SystemPrivilegedGroup}})
	if err := reg.Bootstrap(genericapirequest.WithNamespace(ctx, ""), []byte{10, 96, 0, 1}, 6443); err != nil {
		b.Fatal(err)
	}
	if _, err := reg.Store(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(
		genericapirequest.WithNamespace(ctx, ""), &api.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, false); err != nil {
		b.Fatal(err)
	}
	sas := reg.Store(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"})
	ctx = genericapirequest.WithNamespace(ctx, "ns")
	for i := range n {
		if _, err := sas.Create(ctx, &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("sa-%05d", i), Labels: map[string]string{"app": "bench"}}}, false); err != nil {
			b.Fatal(err)
		}
	}
	return sas, ctx
}

// BenchmarkStoreGet: a get of one ServiceAccount, consistent (RV unset)
// and local (RV=0).
func BenchmarkStoreGet(b *testing.B) {
	for _, rv := range []string{"", "0"} {
		b.Run(fmt.Sprintf("rv=%q", rv), func(b *testing.B) {
			sas, ctx := benchEnv(b, 100)
			opts := &metav1.GetOptions{ResourceVersion: rv}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := sas.Get(ctx, "sa-00042", opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStoreCreate: a create of a ServiceAccount (strategy, encode,
// propose to the in-memory log).
func BenchmarkStoreCreate(b *testing.B) {
	sas, ctx := benchEnv(b, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := sas.Create(ctx, &api.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)}}, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreList: a list of 1000 ServiceAccounts written as JSON from
// the cached item encodings, as the handler does.
func BenchmarkStoreList(b *testing.B) {
	sas, ctx := benchEnv(b, 1000)
	opts := &metainternalversion.ListOptions{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		page, err := sas.ListPage(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		body, err := page.JSON()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := body.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
