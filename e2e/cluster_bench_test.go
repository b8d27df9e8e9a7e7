package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkClusterCreateServiceAccount: creates per second through a
// three-node cluster, 32 clients spread over all nodes (followers forward).
func BenchmarkClusterCreateServiceAccount(b *testing.B) {
	nodes := startCluster(b, 3)
	var cs []*kubernetes.Clientset
	for _, n := range nodes {
		cs = append(cs, clients(b, n, "application/json")...)
	}
	// Client i talks to node i%3: 32 clients spread over all nodes.
	spread := make([]*kubernetes.Clientset, benchClients)
	for i := range spread {
		spread[i] = cs[(i%3)*benchClients+i/3]
	}
	cs = spread
	run := time.Now().UnixNano()
	runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sa-%d-%d", run, i)}}
		_, err := cs.CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{})
		return err
	})
}

// BenchmarkClusterFollowerGet: linearizable GETs (RV unset) served by one
// follower, 32 clients.
func BenchmarkClusterFollowerGet(b *testing.B) {
	nodes := startCluster(b, 3)
	leader := leaderOf(b, nodes)
	follower := followersOf(nodes, leader)[0]
	cs := clients(b, follower, "application/json")
	const objects = 100
	for i := 0; i < objects; i++ {
		if _, err := createSA(cs[0], fmt.Sprintf("get-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	runClients(b, cs, func(cs *kubernetes.Clientset, i int64) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), fmt.Sprintf("get-%d", i%objects), metav1.GetOptions{})
		return err
	})
}

// BenchmarkLeaderKillUnavailability measures, over 10 SIGKILLs of the
// leader, the time from the kill to the first acknowledged write that was
// sent to a survivor after the kill. Run it with -benchtime 1x; it reports median and max.
func BenchmarkLeaderKillUnavailability(b *testing.B) {
	nodes := startCluster(b, 3)
	const kills = 10
	var gaps []time.Duration
	for k := 0; k < kills; k++ {
		leader := leaderOf(b, nodes)
		survivors := followersOf(nodes, leader)
		// Writers on the survivors, bounded by count and time.
		var (
			mu       sync.Mutex
			killedAt time.Time
			first    time.Time
			wg       sync.WaitGroup
		)
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				cs := survivors[w%len(survivors)].clientset()
				for i := 0; i < 100000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					started := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("k%d-w%d-%d", k, w, i)}}, metav1.CreateOptions{})
					cancel()
					done := time.Now()
					mu.Lock()
					// Only a write that started after the kill shows the
					// cluster accepting writes again.
					if err == nil && !killedAt.IsZero() && first.IsZero() && started.After(killedAt) {
						first = done
					}
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		killedAt = time.Now()
		mu.Unlock()
		leader.kill()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			f := first
			mu.Unlock()
			if !f.IsZero() || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		if first.IsZero() {
			b.Fatalf("kill %d: no write succeeded within 30s", k)
		}
		gaps = append(gaps, first.Sub(killedAt))
		leader.start()
		leader.waitReady(90 * time.Second)
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	b.ReportMetric(float64(gaps[len(gaps)/2].Milliseconds()), "median-ms")
	b.ReportMetric(float64(gaps[len(gaps)-1].Milliseconds()), "max-ms")
	b.Logf("write unavailability after leader SIGKILL, sorted: %v", gaps)
}
