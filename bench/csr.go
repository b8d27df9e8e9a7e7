package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"sync"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// csrWaiter follows the run's CSRs (by RunLabel) with an informer and
// wakes whoever waits for one to be issued.
type csrWaiter struct {
	mu      sync.Mutex
	waiting map[string]chan error
}

// ensureCSRs starts the run's CSR informer and makes a key per client.
func (e *env) ensureCSRs(ctx context.Context) error {
	return e.once("csrs", func() error {
		w := &csrWaiter{waiting: map[string]chan error{}}
		csrs := e.client(0).CertificatesV1().CertificateSigningRequests()
		sel := RunLabel + "=" + e.runID
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return csrs.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return csrs.Watch(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(lw, &certificatesv1.CertificateSigningRequest{}, 0, cache.Indexers{})
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    w.observe,
			UpdateFunc: func(_, obj any) { w.observe(obj) },
		}); err != nil {
			return err
		}
		stop := make(chan struct{})
		go inf.Run(stop)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			close(stop)
			return fmt.Errorf("the CSR watch did not start: %w", ctx.Err())
		}
		e.onClose(func() { close(stop) })
		e.csrs = w
		return nil
	})
}

// observe wakes the waiter of an issued, denied or failed CSR.
func (w *csrWaiter) observe(obj any) {
	c, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok {
		return
	}
	var outcome error
	switch {
	case len(c.Status.Certificate) > 0:
	case hasCondition(c, certificatesv1.CertificateDenied), hasCondition(c, certificatesv1.CertificateFailed):
		outcome = fmt.Errorf("%w: %s", errCSRRefused, c.Name)
	default:
		return
	}
	w.mu.Lock()
	ch := w.waiting[c.Name]
	delete(w.waiting, c.Name)
	w.mu.Unlock()
	if ch != nil {
		ch <- outcome
	}
}

// expect registers interest in name before it is created, so that its
// issue cannot be missed.
func (w *csrWaiter) expect(name string) <-chan error {
	ch := make(chan error, 1)
	w.mu.Lock()
	w.waiting[name] = ch
	w.mu.Unlock()
	return ch
}

func (w *csrWaiter) forget(name string) {
	w.mu.Lock()
	delete(w.waiting, name)
	w.mu.Unlock()
}

func hasCondition(c *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == t && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// csrIssuer issues CSRs for the kube-apiserver-client signer: create,
// approve through /approval, wait until status.certificate is set.
type csrIssuer struct {
	e      *env
	prefix string              // keeps the names of two workloads apart
	keys   []*ecdsa.PrivateKey // one per client
}

func newCSRIssuer(ctx context.Context, e *env, prefix string) (*csrIssuer, error) {
	if err := e.ensureCSRs(ctx); err != nil {
		return nil, err
	}
	is := &csrIssuer{e: e, prefix: prefix}
	for range e.cfg.Clients {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		is.keys = append(is.keys, k)
	}
	return is, nil
}

// issue is one operation; its latency is the whole issue.
func (is *csrIssuer) issue(ctx context.Context, client, seq int) error {
	e := is.e
	name := fmt.Sprintf("%s%s-%s-%d-%d", NamespacePrefix, e.runID, is.prefix, client, seq)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: name, Organization: []string{"trustplane-bench"}},
	}, is.keys[client%len(is.keys)])
	if err != nil {
		return err
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: e.runID}},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	issued := e.csrs.expect(name)
	defer e.csrs.forget(name)
	csrs := e.client(client).CertificatesV1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: "TrustplaneBench", Message: "approved by trustplane bench",
	})
	if _, err := csrs.UpdateApproval(ctx, name, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	select {
	case err := <-issued:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the certificate: %w", ctx.Err())
	}
}
