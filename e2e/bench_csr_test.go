package e2e_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkCSRSigning measures signed CSRs per second on one node: each of
// 32 clients creates a kube-apiserver-client CSR, approves it through
// /approval, and waits until the leader's signer has written the
// certificate (seen through one shared watch). The latency is create to
// issued.
func BenchmarkCSRSigning(b *testing.B) {
	n := startNode(b)
	cfg := n.restConfig()
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	issuedSeen := map[string]bool{}
	w, err := csrs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !ok || len(c.Status.Certificate) == 0 {
				continue
			}
			mu.Lock()
			if !issuedSeen[c.Name] {
				issuedSeen[c.Name] = true
				if ch := waiting[c.Name]; ch != nil {
					close(ch)
				}
			}
			mu.Unlock()
		}
	}()

	run := 0
	b.Run("create-approve-issued", func(b *testing.B) {
		run++
		reqs := make([][]byte, b.N+1)
		for i := range reqs {
			reqs[i] = makeKeyedCSR(b, &x509.CertificateRequest{Subject: pkix.Name{CommonName: fmt.Sprintf("bench-%d", i)}}).pem
		}
		runParallel(b, benchClients, func(_ int, i int64) error {
			name := fmt.Sprintf("bench-%d-%d", run, i)
			done := make(chan struct{})
			mu.Lock()
			waiting[name] = done
			mu.Unlock()
			c, err := csrs.Create(ctx, csrObject(name, certificatesv1.KubeAPIServerClientSignerName, reqs[i], 0,
				certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
				Type: certificatesv1.CertificateApproved, Status: "True", Reason: "Bench", Message: "approved by the benchmark"}}
			if _, err := csrs.UpdateApproval(ctx, name, c, metav1.UpdateOptions{}); err != nil {
				return err
			}
			select {
			case <-done:
				return nil
			case <-time.After(60 * time.Second):
				return fmt.Errorf("CSR %s was not issued within 60s", name)
			}
		})
	})
}
