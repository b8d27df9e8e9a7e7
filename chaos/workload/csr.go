package workload

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	mrand "math/rand"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/chaos/history"
)

// csrClient creates a CSR for the kube-apiserver-client signer every
// CSRInterval and approves it, each request on a random node. The signer
// runs on the holder of the controllers' lease; failovers in between must
// not make it sign twice.
func (w *Workload) csrClient(ctx context.Context, id int, rng *mrand.Rand) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		name := fmt.Sprintf("%s-csr-%d", w.cfg.RunID, seq)
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name, Organization: []string{"chaos"}}}, key)
		if err != nil {
			return
		}
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{RunLabel: w.cfg.RunID}},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certificatesv1.KubeAPIServerClientSignerName,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			},
		}
		node := rng.Intn(len(w.clients))
		op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.CSRCreate, Key: name, Call: w.rec.Now()}
		rctx, cancel := w.reqCtx(ctx)
		_, err = w.clients[node].CertificatesV1().CertificateSigningRequests().Create(rctx, csr, metav1.CreateOptions{})
		cancel()
		op.Return = w.rec.Now()
		op.Outcome, op.Code, op.Reason = outcome(err)
		w.record(op)
		if op.Outcome != history.Fail {
			w.approve(ctx, id, name, rng)
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.cfg.CSRInterval):
		}
	}
}

// approve reads the CSR and adds the Approved condition, retrying a
// conflict or a missing CSR (an unknown create) a few times.
func (w *Workload) approve(ctx context.Context, id int, name string, rng *mrand.Rand) {
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		node := rng.Intn(len(w.clients))
		csrs := w.clients[node].CertificatesV1().CertificateSigningRequests()
		rctx, cancel := w.reqCtx(ctx)
		cur, err := csrs.Get(rctx, name, metav1.GetOptions{})
		if err != nil {
			cancel()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		cur.Status.Conditions = append(cur.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "ChaosApproved", Message: "approved by trustplane chaos", LastUpdateTime: metav1.Now(),
		})
		op := history.Op{Client: id, Node: w.cfg.Endpoints[node].Name, Kind: history.CSRApprove, Key: name, Call: w.rec.Now()}
		_, err = csrs.UpdateApproval(rctx, name, cur, metav1.UpdateOptions{})
		cancel()
		op.Return = w.rec.Now()
		op.Outcome, op.Code, op.Reason = outcome(err)
		w.record(op)
		if op.Outcome != history.Fail {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// certDigest names a certificate in the history without keeping it.
func certDigest(cert []byte) string {
	if len(cert) == 0 {
		return ""
	}
	sum := sha256.Sum256(cert)
	return hex.EncodeToString(sum[:8])
}

func approved(c *certificatesv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
