package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1alpha1 "k8s.io/api/certificates/v1alpha1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/trustplane/trustplane/certs"
)

// csrPEM is a PEM CERTIFICATE REQUEST for cn in orgs with a fresh P-256 key.
func csrPEM(t testing.TB, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func newCSR(t testing.TB, name, signer string, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	if len(usages) == 0 {
		usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrPEM(t, name), SignerName: signer, Usages: usages},
	}
}

// TestSignerNameFieldSelector: spec.signerName selects CSRs and
// ClusterTrustBundles on list and watch.
func TestSignerNameFieldSelector(t *testing.T) {
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1alpha1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx := context.Background()
	cs := n.clientset()
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	for name, signer := range map[string]string{"a1": "example.com/a", "a2": "example.com/a", "b1": "example.com/b"} {
		if _, err := csrs.Create(ctx, newCSR(t, name, signer), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csrNames := func(sel string) string {
		l, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("list %q: %v", sel, err)
		}
		var out []string
		for _, c := range l.Items {
			out = append(out, c.Name)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	for sel, want := range map[string]string{
		"spec.signerName=example.com/a":                  "a1,a2",
		"spec.signerName!=example.com/a":                 "b1",
		"spec.signerName=example.com/c":                  "",
		"spec.signerName=example.com/b,metadata.name=b1": "b1",
	} {
		if got := csrNames(sel); got != want {
			t.Errorf("CSRs with %q = %q, want %q", sel, got, want)
		}
	}
	w, err := csrs.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "spec.signerName=example.com/b"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*certificatesv1.CertificateSigningRequest).Name != "b1" {
		t.Fatalf("first event %s %v, want ADDED b1", ev.Type, ev.Object)
	}
	for _, name := range []string{"a3", "b2"} {
		if _, err := csrs.Create(ctx, newCSR(t, name, "example.com/"+name[:1]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if ev := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*certificatesv1.CertificateSigningRequest).Name != "b2" {
		t.Fatalf("event %s %v, want ADDED b2 (a3 filtered out)", ev.Type, ev.Object)
	}

	bundles := cs.CertificatesV1alpha1().ClusterTrustBundles()
	ca := n.caPEM(t)
	for name, signer := range map[string]string{"example.com:a:one": "example.com/a", "example.com:b:one": "example.com/b", "unsigned": ""} {
		b := &certificatesv1alpha1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1alpha1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: ca}}
		if _, err := bundles.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bundle %s: %v", name, err)
		}
	}
	for sel, want := range map[string]string{
		"spec.signerName=example.com/a": "example.com:a:one",
		"spec.signerName=":              "unsigned",
	} {
		l, err := bundles.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("list bundles %q: %v", sel, err)
		}
		var got []string
		for _, b := range l.Items {
			got = append(got, b.Name)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("bundles with %q = %v, want %s", sel, got, want)
		}
	}
	bw, err := bundles.Watch(ctx, metav1.ListOptions{ResourceVersion: "0", FieldSelector: "spec.signerName=example.com/b"})
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Stop()
	if ev := nextEvent(t, bw); ev.Type != watch.Added || ev.Object.(*certificatesv1alpha1.ClusterTrustBundle).Name != "example.com:b:one" {
		t.Fatalf("bundle watch: first event %s %v", ev.Type, ev.Object)
	}
}

// TestClusterTrustBundleVersions: bundles are served only in the versions
// --runtime-config enables, which is enough (the specification; kube 1.33
// also wants the gate, docs/COMPATIBILITY.md); --feature-gates
// ClusterTrustBundle=false still turns them off.
func TestClusterTrustBundleVersions(t *testing.T) {
	off := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=false")
	for _, v := range []string{"v1alpha1", "v1beta1"} {
		r := do(t, off.httpClient(), http.MethodGet, off.url()+"/apis/certificates.k8s.io/"+v+"/clustertrustbundles", nil, nil)
		if r.code != http.StatusNotFound {
			t.Fatalf("%s ClusterTrustBundles with ClusterTrustBundle=false: %d %s", v, r.code, r.body)
		}
	}
	on := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true")
	cs := on.clientset()
	if _, err := cs.CertificatesV1beta1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("v1beta1 bundles with certificates.k8s.io/v1beta1=true: %v", err)
	}
	if _, err := cs.CertificatesV1alpha1().ClusterTrustBundles().List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("v1alpha1 bundles are served when only v1beta1 is enabled")
	}
}

// TestCSRRules checks the CSR's validation, the creator's identity, the
// immutable spec and the condition rules of /approval and /status
// (the specification's invariants 1–4 and its certificate rule).
func TestCSRRules(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "csr/rules", "csr/denied", "csr/failed", "csr/pem") // TestCSRSigning names one "denied" too
	ctx := context.Background()
	csrs := n.clientset().CertificatesV1().CertificateSigningRequests()
	short := int32(599)
	badSig := csrPEM(t, "tampered")
	{
		block, _ := pem.Decode(badSig)
		block.Bytes[len(block.Bytes)-3] ^= 0xff
		badSig = pem.EncodeToMemory(block)
	}
	invalid := []struct {
		name    string
		mutate  func(*certificatesv1.CertificateSigningRequest)
		message string
	}{
		{"not-pem", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") }, "spec.request: Invalid value"},
		{"bad-signature", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = badSig }, "spec.request: Invalid value"},
		{"no-signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "" }, "spec.signerName: Required value"},
		{"unqualified-signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "signer" }, "spec.signerName: Invalid value"},
		{"legacy-signer", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubernetes.io/legacy-unknown" },
			`spec.signerName: Invalid value: "kubernetes.io/legacy-unknown": the legacy signerName is not allowed via this API version`},
		{"no-usages", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = nil }, "spec.usages: Required value"},
		{"unknown-usage", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = []certificatesv1.KeyUsage{"bogus"} }, `spec.usages[0]: Unsupported value: "bogus"`},
		{"duplicate-usage", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageClientAuth}
		}, `spec.usages[1]: Duplicate value: "client auth"`},
		{"short-duration", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = &short },
			"spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"},
	}
	for _, c := range invalid {
		csr := newCSR(t, c.name, "example.com/signer")
		c.mutate(csr)
		_, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
		st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, "")
		if !strings.Contains(st.Message, c.message) {
			t.Errorf("%s: message %q, want it to contain %q", c.name, st.Message, c.message)
		}
		if _, err := csrs.Get(ctx, c.name, metav1.GetOptions{}); err == nil {
			t.Errorf("%s: an invalid CSR was stored", c.name)
		}
	}

	// The creator's identity replaces whatever the client sent.
	csr := newCSR(t, "rules", "example.com/signer")
	csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups = "mallory", "forged", []string{"system:nodes"}
	got, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if me := n.whoami(t); got.Spec.Username != me.Username || !slices.Equal(got.Spec.Groups, me.Groups) || got.Spec.UID != me.UID {
		t.Fatalf("spec identity = %q %q %v, want the creator's, %q %q %v", got.Spec.Username, got.Spec.UID, got.Spec.Groups, me.Username, me.UID, me.Groups)
	}
	if len(got.Status.Conditions) != 0 || len(got.Status.Certificate) != 0 {
		t.Fatalf("a new CSR has status %+v", got.Status)
	}

	// The spec is immutable: an update keeps the old one.
	got.Spec.SignerName = "example.com/other"
	got.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}
	got, err = csrs.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.SignerName != "example.com/signer" || got.Spec.Usages[0] != certificatesv1.UsageDigitalSignature {
		t.Fatalf("spec changed by an update: %+v", got.Spec)
	}

	cert := []byte(n.caPEM(t))
	// A certificate before approval is refused: the specification's
	// precondition, which kube-apiserver does not enforce (it stores the
	// certificate; docs/COMPATIBILITY.md), so it is sent to trustplane only.
	const notApproved = "status.certificate: Forbidden: may only be set on a request with an Approved condition and no Failed condition"
	if n.isTrustplane() {
		pending := got.DeepCopy()
		pending.Status.Certificate = cert
		_, err = csrs.UpdateStatus(ctx, pending, metav1.UpdateOptions{})
		if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, notApproved) {
			t.Fatalf("certificate before approval: %s", st.Message)
		}
	}
	// Approved and Denied cannot both be added (invariant 1).
	both := got.DeepCopy()
	both.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{
		{Type: certificatesv1.CertificateApproved, Status: "True"}, {Type: certificatesv1.CertificateDenied, Status: "True"}}
	_, err = csrs.UpdateApproval(ctx, "rules", both, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, "Approved and Denied conditions are mutually exclusive") {
		t.Fatalf("approved and denied: %s", st.Message)
	}
	// Approved, Denied and Failed may only be True (invariant 4).
	unknown := got.DeepCopy()
	unknown.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "Unknown"}}
	_, err = csrs.UpdateApproval(ctx, "rules", unknown, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, `Unsupported value: "Unknown"`) {
		t.Fatalf("approved unknown: %s", st.Message)
	}
	// Approval through /status is ignored: only /approval adds Approved.
	viaStatus := got.DeepCopy()
	viaStatus.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: "True"}}
	if _, err := csrs.UpdateStatus(ctx, viaStatus, metav1.UpdateOptions{}); err == nil {
		t.Fatal("/status added an Approved condition")
	}

	// kubectl approves through /approval; timestamps are defaulted.
	n.mustKubectl("certificate", "approve", "rules")
	got, err = csrs.Get(ctx, "rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 {
		t.Fatalf("conditions after approve: %+v", got.Status.Conditions)
	}
	cond := got.Status.Conditions[0]
	if cond.Type != certificatesv1.CertificateApproved || cond.Status != "True" || cond.Reason != "KubectlApprove" ||
		cond.LastUpdateTime.IsZero() || cond.LastTransitionTime.IsZero() {
		t.Fatalf("approved condition = %+v", cond)
	}
	// Only one condition per type (invariant 3).
	dup := got.DeepCopy()
	dup.Status.Conditions = append(dup.Status.Conditions, dup.Status.Conditions[0])
	_, err = csrs.UpdateApproval(ctx, "rules", dup, metav1.UpdateOptions{})
	wantAPIError(t, err, 422, metav1.StatusReasonInvalid, "")
	// Approved cannot be removed (invariant 2).
	removed := got.DeepCopy()
	removed.Status.Conditions = nil
	_, err = csrs.UpdateApproval(ctx, "rules", removed, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, `updates may not remove a condition of type "Approved"`) {
		t.Fatalf("remove approved: %s", st.Message)
	}

	// A PEM certificate is accepted once Approved, and is then immutable.
	bad := got.DeepCopy()
	bad.Status.Certificate = []byte("not a certificate")
	_, err = csrs.UpdateStatus(ctx, bad, metav1.UpdateOptions{})
	wantAPIError(t, err, 422, metav1.StatusReasonInvalid, "")
	got.Status.Certificate = cert
	got, err = csrs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Status.Certificate = []byte(strings.Repeat(string(cert), 2))
	_, err = csrs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, "updates may not modify existing certificate content") {
		t.Fatalf("replace certificate: %s", st.Message)
	}

	// A denied request never takes a certificate.
	if _, err := csrs.Create(ctx, newCSR(t, "denied", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("certificate", "deny", "denied")
	d, err := csrs.Get(ctx, "denied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status.Certificate = cert
	if n.isTrustplane() { // kube-apiserver stores it, as before approval
		_, err = csrs.UpdateStatus(ctx, d, metav1.UpdateOptions{})
		if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, notApproved) {
			t.Fatalf("certificate on a denied request: %s", st.Message)
		}
	}

	// Denied cannot be added to an approved request, nor removed.
	approvedNow, err := csrs.Get(ctx, "rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approvedNow.Status.Conditions = append(approvedNow.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: "True"})
	_, err = csrs.UpdateApproval(ctx, "rules", approvedNow, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, "Approved and Denied conditions are mutually exclusive") {
		t.Fatalf("denied after approved: %s", st.Message)
	}
	d, err = csrs.Get(ctx, "denied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status.Conditions = nil
	_, err = csrs.UpdateApproval(ctx, "denied", d, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, `updates may not remove a condition of type "Denied"`) {
		t.Fatalf("remove denied: %s", st.Message)
	}

	// The Failed branch: a signer reports failure through /status; the
	// request then takes no certificate, and Failed cannot be removed.
	if _, err := csrs.Create(ctx, newCSR(t, "failed", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("certificate", "approve", "failed")
	f, err := csrs.Get(ctx, "failed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Status.Conditions = append(f.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateFailed, Status: "True", Reason: "SignerFailed", Message: "the signer could not sign"})
	f, err = csrs.UpdateStatus(ctx, f, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("a Failed condition through /status: %v", err)
	}
	if n.isTrustplane() {
		withCert := f.DeepCopy()
		withCert.Status.Certificate = cert
		_, err = csrs.UpdateStatus(ctx, withCert, metav1.UpdateOptions{})
		if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, notApproved) {
			t.Fatalf("certificate on a failed request: %s", st.Message)
		}
	}
	noFailed := f.DeepCopy()
	noFailed.Status.Conditions = noFailed.Status.Conditions[:1]
	_, err = csrs.UpdateStatus(ctx, noFailed, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, `updates may not remove a condition of type "Failed"`) {
		t.Fatalf("remove failed: %s", st.Message)
	}

	// status.certificate's PEM rules: CERTIFICATE blocks only, without
	// headers, each holding a certificate.
	if _, err := csrs.Create(ctx, newCSR(t, "pem", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.mustKubectl("certificate", "approve", "pem")
	block, _ := pem.Decode(cert)
	for _, c := range []struct {
		name string
		pem  []byte
		msg  string
	}{
		{"a key block", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: block.Bytes}), `only CERTIFICATE PEM blocks are allowed, found "PRIVATE KEY"`},
		{"a header", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: block.Bytes}), "no PEM block headers are permitted"},
		{"an empty block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE"}), "found CERTIFICATE PEM block containing 0 certificates"},
		{"no block", []byte("just text"), "must contain at least one CERTIFICATE PEM block"},
	} {
		p, err := csrs.Get(ctx, "pem", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Certificate = c.pem
		_, err = csrs.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, c.msg) {
			t.Fatalf("certificate with %s: %s", c.name, st.Message)
		}
	}

	// kubectl's table: NAME, AGE, SIGNERNAME, REQUESTOR, REQUESTEDDURATION, CONDITION.
	out := n.mustKubectl("get", "csr")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), "NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION") {
		t.Fatalf("kubectl get csr header: %q", lines[0])
	}
	want := map[string]string{"rules": "Approved,Issued", "denied": "Denied", "failed": "Approved,Failed", "pem": "Approved"}
	me := n.whoami(t).Username
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if c, ok := want[f[0]]; ok {
			if f[2] != "example.com/signer" || f[3] != me || f[4] != "<none>" || f[5] != c {
				t.Errorf("kubectl get csr row %q, want signer, requestor, <none>, %s", l, c)
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("kubectl get csr is missing %v:\n%s", want, out)
	}
}

// TestClusterTrustBundleRules checks bundle validation: only CERTIFICATE
// blocks, each parsing, each a CA, no duplicates, no headers; the naming
// rule in both directions; an immutable signerName.
func TestClusterTrustBundleRules(t *testing.T) {
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true", "--feature-gates", "ClusterTrustBundle=true")
	ctx := context.Background()
	bundles := n.clientset().CertificatesV1beta1().ClusterTrustBundles()
	ca := n.caPEM(t)
	leaf, _, err := n.clusterCA(t).Issue(certs.Request{CommonName: "leaf", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(ca))
	withHeaders := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"k": "v"}, Bytes: block.Bytes}))
	garbage := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not der")}))
	key := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")}))

	cases := []struct {
		name, signer, bundle, message string
	}{
		{"wrong-block", "", key, "spec.trustBundle: Invalid value: \"<value omitted>\": entry 0 has bad block type: PRIVATE KEY"},
		{"headers", "", withHeaders, "entry 0 has PEM block headers"},
		{"garbage", "", garbage, "entry 0 does not parse as X.509"},
		{"leaf", "", string(leaf), "entry 0 does not have the CA bit set"},
		{"dupes", "", ca + ca, "duplicate trust anchor (indices [0 1])"},
		{"empty", "", "", "at least one trust anchor must be provided"},
		{"colon:without-signer", "", ca, `ClusterTrustBundle without signer name must not have ":" in its name`},
		{"no-prefix", "example.com/s", ca, "ClusterTrustBundle for signerName example.com/s must be named with prefix example.com:s:"},
		{"example.com:s:bad-signer", "no-domain", ca, "spec.signerName"},
	}
	for _, c := range cases {
		b := &certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: c.signer, TrustBundle: c.bundle}}
		_, err := bundles.Create(ctx, b, metav1.CreateOptions{})
		st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, "")
		if !strings.Contains(st.Message, c.message) {
			t.Errorf("%s: message %q, want it to contain %q", c.name, st.Message, c.message)
		}
	}

	b, err := bundles.Create(ctx, &certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:s:good"},
		Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: "example.com/s", TrustBundle: ca}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.SignerName = "example.com/other"
	_, err = bundles.Update(ctx, b, metav1.UpdateOptions{})
	if st := wantAPIError(t, err, 422, metav1.StatusReasonInvalid, ""); !strings.Contains(st.Message, "spec.signerName: Invalid value: \"example.com/other\": field is immutable") {
		t.Fatalf("signerName change: %s", st.Message)
	}
}

// TestClusterTrustBundleAttest: publishing a bundle for a signer needs
// attest on signers (the name or a <domain>/* wildcard), with kube's 403;
// a bundle without a signer needs only create; every authenticated user
// can read bundles.
func TestClusterTrustBundleAttest(t *testing.T) {
	// The version alone serves the kind, and turns its gate on for kube's
	// attest plugin too.
	n := startNode(t, "--runtime-config", "certificates.k8s.io/v1beta1=true")
	ctx := context.Background()
	admin := n.clientset()
	ca := n.caPEM(t)
	createClusterRole(t, admin, "bundle-writer", rbacv1.PolicyRule{
		Verbs: []string{"create", "update"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"clustertrustbundles"}})
	bindClusterRole(t, admin, "bob-writes-bundles", "bundle-writer", userSubject("bob"))
	bob := n.userClientset(t, "bob").CertificatesV1beta1().ClusterTrustBundles()
	bundle := func(name, signer string) *certificatesv1beta1.ClusterTrustBundle {
		return &certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1beta1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: ca}}
	}
	_, err := bob.Create(ctx, bundle("example.com:s:one", "example.com/s"), metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
		`clustertrustbundles.certificates.k8s.io "example.com:s:one" is forbidden: user not permitted to attest for signerName "example.com/s"`)
	if _, err := bob.Create(ctx, bundle("plain", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a bundle without a signer: %v", err)
	}
	createClusterRole(t, admin, "attest-example", rbacv1.PolicyRule{
		Verbs: []string{"attest"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{"example.com/*"}})
	bindClusterRole(t, admin, "bob-attests", "attest-example", userSubject("bob"))
	waitFor(t, 10*time.Second, "bob's attest permission", func() bool {
		_, err := bob.Create(ctx, bundle("example.com:s:one", "example.com/s"), metav1.CreateOptions{})
		return err == nil
	})
	_, err = bob.Create(ctx, bundle("other.org:s:one", "other.org/s"), metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, "*")

	carol := n.userClientset(t, "carol").CertificatesV1beta1().ClusterTrustBundles()
	l, err := carol.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("an authenticated user lists bundles: %v", err)
	}
	// Besides bob's two, the controllers publish the built-in signers'.
	var bobs int
	for _, b := range l.Items {
		if !strings.HasPrefix(b.Spec.SignerName, "kubernetes.io/") {
			bobs++
		}
	}
	if bobs != 2 {
		t.Fatalf("carol sees %d of bob's bundles, want 2", bobs)
	}
	if _, err := carol.Get(ctx, "plain", metav1.GetOptions{}); err != nil {
		t.Fatalf("an authenticated user reads a bundle: %v", err)
	}
	_, err = carol.Create(ctx, bundle("carols", ""), metav1.CreateOptions{})
	wantAPIError(t, err, 403, metav1.StatusReasonForbidden, `clustertrustbundles.certificates.k8s.io is forbidden: User "carol" cannot create resource "clustertrustbundles" in API group "certificates.k8s.io" at the cluster scope`)
}
