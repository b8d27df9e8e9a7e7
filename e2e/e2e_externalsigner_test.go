package e2e_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	jose "gopkg.in/go-jose/go-jose.v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1alpha1 "k8s.io/externaljwt/apis/v1alpha1"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"
	"k8s.io/kubernetes/pkg/serviceaccount/externaljwt/plugin"
)

// externalSignerRBAC lets user sign for issuer and two audiences (the
// issuer itself and "vault"): post on the signing path, sign on the issuer
// and the audiences by name, and read the key set. docs/OPERATIONS.md
// "Fleet identity" shows the same.
func externalSignerRBAC(user, issuer string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: external-jwt-signer
rules:
- nonResourceURLs: ["/externaljwt/v1alpha1/sign"]
  verbs: ["post"]
- apiGroups: ["externaljwt.trustplane.io"]
  resources: ["issuers"]
  resourceNames: [%q]
  verbs: ["sign"]
- apiGroups: ["externaljwt.trustplane.io"]
  resources: ["audiences"]
  resourceNames: [%q, "vault"]
  verbs: ["sign"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: external-jwt-signer
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: external-jwt-signer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: external-jwt-signer-keys
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:service-account-issuer-discovery}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %s}
`, issuer, issuer, user, user)
}

// startExternalSigner runs trustplane external-signer with kubeconfig and
// returns a gRPC client of its socket, and the socket; the process is
// killed when the test ends.
func startExternalSigner(t testing.TB, kubeconfig string, extra ...string) (v1alpha1.ExternalJWTSignerClient, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "signer.sock")
	cmd := exec.Command(binPath, append([]string{"external-signer", "--socket", sock, "--kubeconfig", kubeconfig, "--timeout", "2s"}, extra...)...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "signer.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait(); logf.Close() })
	waitFor(t, 20*time.Second, "the signer's socket", func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0 && fi.Mode().Perm() == 0o600
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return v1alpha1.NewExternalJWTSignerClient(conn), sock
}

// TestE2EExternalSigner: the ExternalJWTSigner sidecar signs through the
// cluster with its own identity, RBAC deciding issuer and audiences; the
// token verifies with a key FetchKeys returns; FetchKeys includes a
// pending key; the cluster's own issuer is never signed; with trustplane
// down Sign fails fast and nothing is signed.
func TestE2EExternalSigner(t *testing.T) {
	n := startNode(t)
	n.trustplaneOnly(t, "trustplane's signing endpoint")
	const issuer = "https://ref.example"
	client, sock := startExternalSigner(t, n.userKubeconfig(t, "ref-signer"), "--max-token-expiration", "2h")
	ctx := context.Background()
	claims := func(iss string, aud ...string) string {
		now := time.Now().Unix()
		return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"iss":%q,"aud":["%s"],"sub":"system:serviceaccount:default:default","iat":%d,"nbf":%d,"exp":%d}`,
			iss, strings.Join(aud, `","`), now, now, now+3600))
	}
	wantCode := func(err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
			t.Fatalf("error %v, want %s with %q", err, code, msg)
		}
	}

	md, err := client.Metadata(ctx, &v1alpha1.MetadataRequest{})
	if err != nil || md.MaxTokenExpirationSeconds != 7200 {
		t.Fatalf("Metadata: %v %v", md, err)
	}
	_, err = client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: claims(issuer, issuer)})
	wantCode(err, codes.PermissionDenied, `User "ref-signer" cannot post path "/externaljwt/v1alpha1/sign"`)

	f := filepath.Join(t.TempDir(), "rbac.yaml")
	os.WriteFile(f, []byte(externalSignerRBAC("ref-signer", issuer)), 0o600)
	n.mustKubectl("apply", "-f", f)

	var signed *v1alpha1.SignJWTResponse
	seg := claims(issuer, issuer, "vault")
	waitFor(t, 10*time.Second, "RBAC to allow signing", func() bool {
		signed, err = client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: seg})
		return err == nil
	})
	keys, err := client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{})
	if err != nil || len(keys.Keys) != 1 || keys.RefreshHintSeconds <= 0 || keys.DataTimestamp == nil {
		t.Fatalf("FetchKeys: %v %v", keys, err)
	}
	verify(t, signed.Header+"."+seg+"."+signed.Signature, keys.Keys)

	for _, c := range []struct {
		claims, msg string
	}{
		{claims(issuer, "aws"), `audiences.externaljwt.trustplane.io "aws" is forbidden`},
		{claims("https://other.example", issuer), `may not sign for this issuer`},
		{claims("https://kubernetes.default.svc.cluster.local", issuer), `this cluster's own issuer`},
		{claims("kubernetes/serviceaccount", issuer), `this cluster's own issuer`},
	} {
		_, err := client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: c.claims})
		wantCode(err, codes.PermissionDenied, c.msg)
	}
	_, err = client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: "not base64!"})
	wantCode(err, codes.InvalidArgument, "URL-safe base64")

	// kube-apiserver's own client of the API (its plugin and key cache):
	// it checks the header's fields, algorithm and key id against the
	// keys it fetched, and assembles the token.
	kubePlugin, keyCache, err := plugin.New(ctx, issuer, sock, 30*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	sa := core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default", UID: "0b4f4a2c-5a3c-4c39-8a36-0e2f0c1d2e3f"}}
	sc, pc, err := serviceaccount.Claims(sa, nil, nil, nil, 3600, 0, []string{issuer})
	if err != nil {
		t.Fatal(err)
	}
	kubeToken, err := kubePlugin.GenerateToken(ctx, sc, pc)
	if err != nil {
		t.Fatalf("kube's plugin: %v", err)
	}
	jws, err := jose.ParseSigned(kubeToken)
	if err != nil {
		t.Fatal(err)
	}
	kid := jws.Signatures[0].Header.KeyID
	if pub := keyCache.GetPublicKeys(ctx, kid); len(pub) != 1 {
		t.Fatalf("kube's key cache has no key %s", kid)
	} else if _, err := jws.Verify(pub[0].PublicKey); err != nil {
		t.Fatalf("kube's token does not verify with kube's key cache: %v", err)
	}

	// A pending key is fetched before it signs: the API server behind the
	// sidecar trusts it before any token carries it.
	n.mustRotate(t, "signing-key", "start")
	keys, err = client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{})
	if err != nil || len(keys.Keys) != 2 {
		t.Fatalf("FetchKeys after start: %v %v", keys, err)
	}
	again, err := client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: seg})
	if err != nil {
		t.Fatal(err)
	}
	if again.Header != signed.Header {
		t.Fatal("the pending key signed before its promotion")
	}

	// trustplane down: fail fast, sign nothing.
	n.kill()
	for _, call := range []func() error{
		func() error { _, err := client.Sign(ctx, &v1alpha1.SignJWTRequest{Claims: seg}); return err },
		func() error { _, err := client.FetchKeys(ctx, &v1alpha1.FetchKeysRequest{}); return err },
	} {
		start := time.Now()
		err := call()
		wantCode(err, codes.Unavailable, "is unreachable")
		// A bound, not a timing assertion: --timeout is 2s.
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("a call with trustplane down took %v", d)
		}
	}
}

// verify checks that token is signed by one of keys (PKIX, as FetchKeys
// returns them) under the key id its header names.
func verify(t *testing.T, token string, keys []*v1alpha1.Key) {
	t.Helper()
	jws, err := jose.ParseSigned(token)
	if err != nil {
		t.Fatal(err)
	}
	kid := jws.Signatures[0].Header.KeyID
	for _, k := range keys {
		if k.KeyId != kid {
			continue
		}
		pub, err := x509.ParsePKIXPublicKey(k.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jws.Verify(pub); err != nil {
			t.Fatalf("the token does not verify with key %s: %v", kid, err)
		}
		return
	}
	t.Fatalf("no fetched key has the token's kid %s", kid)
}
