package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// listObjects is the size of the listed collection, as in the target.
const listObjects = 10_000

// listRounds is how many full lists each BenchmarkList10k variant times per
// b.N iteration (run it with -benchtime 1x: the collection is created once).
const listRounds = 30

// rawClient is a plain HTTPS client with the admin certificate that never
// asks for, nor transparently decodes, gzip: a request that wants gzip sets
// Accept-Encoding itself and gets the compressed bytes.
func rawClient(b *testing.B, n *node) *http.Client {
	b.Helper()
	tlsCfg, err := rest.TLSConfigFor(n.restConfig())
	if err != nil {
		b.Fatal(err)
	}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, DisableCompression: true,
	}}
}

// createServiceAccounts creates count ServiceAccounts named prefix-i in
// default with 32 concurrent clients.
func createServiceAccounts(b *testing.B, cs []*kubernetes.Clientset, prefix string, count int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for c := range cs {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(count) {
					return
				}
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i)}}
				if _, err := cs[c].CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// percentiles reports p50/p99/max of lat in milliseconds with a prefix.
func percentiles(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), prefix+"p50-ms")
	b.ReportMetric(ms(lat[int(0.99*float64(len(lat)-1))]), prefix+"p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), prefix+"max-ms")
}

// BenchmarkList10k measures the latency of one full list of 10,000
// ServiceAccounts, one list at a time (no concurrent lists), over HTTPS:
//   - json-gzip: unpaged JSON, Accept-Encoding: gzip; the compressed body is
//     read and discarded, not decompressed.
//   - json: unpaged JSON without compression.
//   - json-limit500: limit=500, following continue tokens through all 20
//     pages; the latency is that of all the pages. The client extracts the
//     continue token with encoding/json, which decodes each page.
//   - client-go: client-go's List (unpaged, JSON, decoded into typed objects
//     by the client), for reference.
//
// Each variant times listRounds lists per iteration after two warm-up lists;
// p50/p99 are per full list. Set TRUSTPLANE_BENCH_PROFILE to profile the
// server during each variant.
func BenchmarkList10k(b *testing.B) {
	n := startNode(b)
	cs := clients(b, n, "application/json")
	createServiceAccounts(b, cs, "list", listObjects)
	raw := rawClient(b, n)
	url := n.url() + "/api/v1/namespaces/default/serviceaccounts"

	get := func(u string, gzip bool) ([]byte, error) {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		if gzip {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := raw.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
		}
		if gzip && resp.Header.Get("Content-Encoding") != "gzip" {
			return nil, fmt.Errorf("GET %s: asked for gzip, got Content-Encoding %q", u, resp.Header.Get("Content-Encoding"))
		}
		return body, nil
	}
	variants := []struct {
		name string
		list func() (int, error) // returns the bytes read
	}{
		{"json-gzip", func() (int, error) {
			body, err := get(url, true)
			return len(body), err
		}},
		{"json", func() (int, error) {
			body, err := get(url, false)
			if err == nil && !bytes.Contains(body, []byte(`"list-10000"`)) {
				err = fmt.Errorf("the list misses list-10000")
			}
			return len(body), err
		}},
		{"json-limit500", func() (int, error) {
			total, items, cont := 0, 0, ""
			for {
				u := url + "?limit=500"
				if cont != "" {
					u += "&continue=" + cont
				}
				body, err := get(u, false)
				if err != nil {
					return total, err
				}
				total += len(body)
				var page struct {
					Metadata struct {
						Continue string `json:"continue"`
					} `json:"metadata"`
					Items []json.RawMessage `json:"items"`
				}
				if err := json.Unmarshal(body, &page); err != nil {
					return total, err
				}
				items += len(page.Items)
				if page.Metadata.Continue == "" {
					break
				}
				cont = page.Metadata.Continue
			}
			if items < listObjects {
				return total, fmt.Errorf("paged list returned %d items, want at least %d", items, listObjects)
			}
			return total, nil
		}},
		{"client-go", func() (int, error) {
			l, err := cs[0].CoreV1().ServiceAccounts("default").List(context.Background(), metav1.ListOptions{})
			if err == nil && len(l.Items) < listObjects {
				err = fmt.Errorf("client-go list returned %d items", len(l.Items))
			}
			return 0, err
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < 2; i++ {
				if _, err := v.list(); err != nil {
					b.Fatal(err)
				}
			}
			var lat []time.Duration
			size := 0
			b.ResetTimer()
			profileVariant(b, n, v.name, func() {
				for i := 0; i < b.N*listRounds; i++ {
					t0 := time.Now()
					sz, err := v.list()
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					size = sz
				}
			})
			b.StopTimer()
			percentiles(b, "", lat)
			if size > 0 {
				b.ReportMetric(float64(size)/1024, "KiB/list")
			}
		})
	}
}

// profileVariant is profileDuring with the profile written to
// $TRUSTPLANE_BENCH_PROFILE.<name>, so that each variant keeps its own.
func profileVariant(b *testing.B, n *node, name string, fn func()) {
	path := os.Getenv("TRUSTPLANE_BENCH_PROFILE")
	if path == "" {
		fn()
		return
	}
	b.Setenv("TRUSTPLANE_BENCH_PROFILE", path+"."+name)
	profileDuring(b, n, fn)
}

// Watch fan-out parameters, as in the target.
const (
	fanoutWatchers = 1000
	fanoutConns    = 8  // HTTP/2 connections; the server allows 250 streams on each
	fanoutRate     = 20 // writes per second
	fanoutDuration = 15 * time.Second
)

// fanoutAnnotation carries the writer's send time (UnixNano) in each object.
const fanoutAnnotation = "bench.trustplane.io/sent"

// BenchmarkWatchFanout1000 opens 1,000 concurrent JSON watches of
// ServiceAccounts in default on one node, over fanoutConns HTTP/2
// connections (125 streams each: one raw HTTPS client per connection),
// reading newline-delimited events without decoding them. One writer then
// creates 20 ServiceAccounts per second for 15 s. Per event and watcher it
// records the receive time; the delivery latency is reported
//   - since-ack: receive time minus the time the writer's create returned
//     (negative when the event beat the response; counted as 0);
//   - since-send: receive time minus the time the writer sent the create
//     (the annotation it set), which includes the Raft commit.
//
// It fails if a watcher misses an event.
func BenchmarkWatchFanout1000(b *testing.B) {
	for i := 0; i < b.N; i++ {
		watchFanout(b)
	}
}

func watchFanout(b *testing.B) {
	n := startNode(b)
	writer := n.clientset()
	start, err := writer.CoreV1().ServiceAccounts("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	conns := make([]*http.Client, fanoutConns)
	for i := range conns {
		conns[i] = rawClient(b, n)
		conns[i].Timeout = 0
	}
	watchURL := n.url() + "/api/v1/namespaces/default/serviceaccounts?watch=true&resourceVersion=" + start.ResourceVersion

	total := int(fanoutRate * fanoutDuration / time.Second)
	// recv[w][seq] is when watcher w read the event of write seq.
	recv := make([][]time.Time, fanoutWatchers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ready, done sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < fanoutWatchers; w++ {
		recv[w] = make([]time.Time, total)
		ready.Add(1)
		done.Add(1)
		go func(w int) {
			defer done.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, watchURL, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := conns[w%fanoutConns].Do(req)
			ready.Done()
			if err != nil {
				failed.Store(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Store(fmt.Errorf("watch: %s", resp.Status))
				return
			}
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			got := 0
			for got < total {
				line, err := r.ReadSlice('\n')
				if err != nil {
					if ctx.Err() == nil {
						failed.Store(fmt.Errorf("watcher %d after %d events: %w", w, got, err))
					}
					return
				}
				now := time.Now()
				seq, ok := fanoutSeq(line)
				if !ok || seq >= total {
					continue
				}
				recv[w][seq] = now
				got++
			}
		}(w)
	}
	ready.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Second) // let every watch register with the cache

	sent := make([]time.Time, total)
	acked := make([]time.Time, total)
	profileVariant(b, n, "fanout", func() {
		tick := time.NewTicker(time.Second / fanoutRate)
		defer tick.Stop()
		for seq := 0; seq < total; seq++ {
			<-tick.C
			sent[seq] = time.Now()
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("fanout-%d", seq),
				Annotations: map[string]string{fanoutAnnotation: strconv.FormatInt(sent[seq].UnixNano(), 10)},
			}}
			if _, err := writer.CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			acked[seq] = time.Now()
		}
	})
	// Every event should arrive well within this.
	waitDone := make(chan struct{})
	go func() { done.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(30 * time.Second):
		cancel()
		<-waitDone
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	var sinceAck, sinceSend []time.Duration
	missing := 0
	for w := range recv {
		for seq, t := range recv[w] {
			if t.IsZero() {
				missing++
				continue
			}
			sinceAck = append(sinceAck, max(0, t.Sub(acked[seq])))
			sinceSend = append(sinceSend, t.Sub(sent[seq]))
		}
	}
	if missing > 0 {
		b.Fatalf("%d of %d deliveries missing", missing, fanoutWatchers*total)
	}
	percentiles(b, "ack-", sinceAck)
	percentiles(b, "send-", sinceSend)
	b.ReportMetric(float64(len(sinceAck)), "deliveries")
}

// fanoutSeq finds the writer's sequence number in an event line by its
// name, "fanout-<seq>", without decoding the JSON.
func fanoutSeq(line []byte) (int, bool) {
	const marker = `"name":"fanout-`
	i := bytes.Index(line, []byte(marker))
	if i < 0 {
		return 0, false
	}
	rest := line[i+len(marker):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0, false
	}
	seq, err := strconv.Atoi(string(rest[:j]))
	return seq, err == nil
}
