package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// benchClients is the number of concurrent clients, as in the targets.
const benchClients = 32

// clients returns benchClients clientsets, each with its own TLS connection,
// so the server sees 32 clients rather than 32 streams on one connection.
func clients(b *testing.B, n *node, contentType string) []*kubernetes.Clientset {
	b.Helper()
	out := make([]*kubernetes.Clientset, benchClients)
	for i := range out {
		cfg := n.restConfig()
		cfg.ContentType = contentType
		cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
		tlsCfg, err := rest.TLSConfigFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}
		cs, err := kubernetes.NewForConfigAndClient(cfg, &http.Client{Transport: tr, Timeout: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = cs
	}
	return out
}

// runClients runs b.N operations spread over the clients and reports
// throughput and latency percentiles.
func runClients(b *testing.B, cs []*kubernetes.Clientset, op func(cs *kubernetes.Clientset, i int64) error) {
	b.Helper()
	runParallel(b, len(cs), func(c int, i int64) error { return op(cs[c], i) })
}

// runParallel runs b.N operations over n concurrent clients (op gets the
// client's number and the operation's) and reports throughput and latency.
func runParallel(b *testing.B, n int, op func(c int, i int64) error) {
	b.Helper()
	var next atomic.Int64
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := op(c, i); err != nil {
					failed.Store(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	reportLatency(b, lat, elapsed)
}

// reportLatency reports throughput and latency percentiles of b.N operations.
func reportLatency(b *testing.B, lat [][]time.Duration, elapsed time.Duration) {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkCreateServiceAccount measures ServiceAccount creates per second
// through HTTPS with fsync on, 32 clients.
func BenchmarkCreateServiceAccount(b *testing.B) {
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		b.Run(ct[len("application/"):], func(b *testing.B) {
			n := startNode(b)
			cs := clients(b, n, ct)
			run := time.Now().UnixNano()
			profileDuring(b, n, func() {
				runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
					sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sa-%d-%d", run, i)}}
					_, err := cs.CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{})
					return err
				})
			})
		})
	}
}

// BenchmarkGetServiceAccount measures consistent (linearizable, RV unset)
// and RV=0 GETs of ServiceAccounts, 32 clients.
func BenchmarkGetServiceAccount(b *testing.B) {
	n := startNode(b)
	cs := clients(b, n, "application/json")
	const objects = 100
	for i := 0; i < objects; i++ {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("get-%d", i)}}
		if _, err := cs[0].CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, rv := range []struct{ name, rv string }{{"consistent", ""}, {"rv0", "0"}} {
		b.Run(rv.name, func(b *testing.B) {
			profileDuring(b, n, func() {
				runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
					_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), fmt.Sprintf("get-%d", i%objects), metav1.GetOptions{ResourceVersion: rv.rv})
					return err
				})
			})
		})
	}
}

// profileDuring captures a CPU profile of the server while fn runs, into
// TRUSTPLANE_BENCH_PROFILE if that is set (go tool pprof reads it).
func profileDuring(b *testing.B, n *node, fn func()) {
	path := os.Getenv("TRUSTPLANE_BENCH_PROFILE")
	if path == "" {
		fn()
		return
	}
	done := make(chan error, 1)
	go func() {
		resp, err := n.httpClient().Get(n.url() + "/debug/pprof/profile?seconds=5")
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		done <- err
	}()
	fn()
	if err := <-done; err != nil {
		b.Logf("profile: %v", err)
	}
}

// BenchmarkGetServiceAccountRaw is BenchmarkGetServiceAccount with plain
// HTTPS clients that read but do not decode the body, so the client's own
// JSON decoding (which shares the two cores) weighs less in the latency.
func BenchmarkGetServiceAccountRaw(b *testing.B) {
	n := startNode(b)
	cs := clients(b, n, "application/json")
	const objects = 100
	for i := 0; i < objects; i++ {
		if _, err := createSA(cs[0], fmt.Sprintf("get-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	raw := make([]*http.Client, benchClients)
	for i := range raw {
		cfg := n.restConfig()
		tlsCfg, err := rest.TLSConfigFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		raw[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}
	}
	for _, rv := range []struct{ name, query string }{{"consistent", ""}, {"rv0", "?resourceVersion=0"}} {
		b.Run(rv.name, func(b *testing.B) {
			profileDuring(b, n, func() { runGets(b, n, raw, objects, rv.query) })
		})
	}
}

// runGets runs b.N raw GETs of the get-<i> ServiceAccounts with query.
func runGets(b *testing.B, n *node, raw []*http.Client, objects int, query string) {
	runParallel(b, len(raw), func(c int, i int64) error {
		resp, err := raw[c].Get(fmt.Sprintf("%s/api/v1/namespaces/default/serviceaccounts/get-%d%s", n.url(), i%int64(objects), query))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET: %s", resp.Status)
		}
		return nil
	})
}
