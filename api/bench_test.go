package api

import (
	"fmt"
	"net/http"
	"testing"
)

// Benchmarks of the write handlers, from the request to the response body,
// over the fuzz environment (fuzzenv_test.go): the real handlers, stores,
// strategies, field managers and fsm behind a one-voter log, without HTTP,
// TLS, authentication or raft's disk. They measure what trustplane bench's
// create and apply workloads spend in the handler, per operation:
//
//	go test -run '^$' -bench 'BenchmarkHandler' -benchmem ./api/

// benchApplyObjects is how many ConfigMaps the apply benchmark applies in
// turn, as each client of trustplane bench's apply workload does.
const benchApplyObjects = 10

// applyBody is what client-go sends for trustplane bench's apply workload:
// a ConfigMapApplyConfiguration marshalled to JSON, sent as
// application/apply-patch+yaml.
func applyBody(name string, n int) []byte {
	return fmt.Appendf(nil, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"fuzz","labels":{"app":"bench"}},"data":{"n":"%d","static":"v"}}`, name, n)
}

// BenchmarkHandlerApply: a forced server-side apply of one of ten
// ConfigMaps that changes one value, as trustplane bench's apply workload.
func BenchmarkHandlerApply(b *testing.B) {
	e := newFuzzEnv(b)
	defer e.reset(b)
	path := func(i int) string {
		return fmt.Sprintf("/api/v1/namespaces/fuzz/configmaps/a-%d?fieldManager=trustplane-bench&force=true", i%benchApplyObjects)
	}
	for i := range benchApplyObjects {
		if rec := e.do(http.MethodPatch, path(i), "application/apply-patch+yaml", applyBody(fmt.Sprintf("a-%d", i), i)); rec.Code != http.StatusCreated {
			b.Fatalf("first apply: %d %s", rec.Code, rec.Body)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n := i + benchApplyObjects
		if rec := e.do(http.MethodPatch, path(n), "application/apply-patch+yaml", applyBody(fmt.Sprintf("a-%d", n%benchApplyObjects), n)); rec.Code != http.StatusOK {
			b.Fatalf("apply: %d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkHandlerCreate: a create of a ConfigMap as JSON, as trustplane
// bench's create workload.
func BenchmarkHandlerCreate(b *testing.B) {
	e := newFuzzEnv(b)
	defer e.reset(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		body := fmt.Appendf(nil, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c-%d"},"data":{"k":"v"}}`, i)
		if rec := e.do(http.MethodPost, "/api/v1/namespaces/fuzz/configmaps", "application/json", body); rec.Code != http.StatusCreated {
			b.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
	}
}
