package e2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1alpha1 "k8s.io/externaljwt/apis/v1alpha1"
)

// BenchmarkExternalSignerSign measures ExternalJWTSigner Sign calls per
// second through the sidecar (gRPC on its unix socket, then HTTPS to one
// node, RBAC's sign checks, one P-256 signature), 32 concurrent callers
// as a busy kube-apiserver's token requests.
func BenchmarkExternalSignerSign(b *testing.B) {
	n := startNode(b)
	const issuer = "https://ref.example"
	f := filepath.Join(b.TempDir(), "rbac.yaml")
	os.WriteFile(f, []byte(externalSignerRBAC("ref-signer", issuer)), 0o600)
	n.mustKubectl("apply", "-f", f)
	client, _ := startExternalSigner(b, n.userKubeconfig(b, "ref-signer"))
	now := time.Now().Unix()
	seg := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"iss":%q,"aud":[%q],"sub":"system:serviceaccount:default:default","iat":%d,"nbf":%d,"exp":%d}`, issuer, issuer, now, now, now+3600))
	waitFor(b, 10*time.Second, "RBAC to allow signing", func() bool {
		_, err := client.Sign(context.Background(), &v1alpha1.SignJWTRequest{Claims: seg})
		return err == nil
	})
	profileDuring(b, n, func() {
		runParallel(b, benchClients, func(int, int64) error {
			_, err := client.Sign(context.Background(), &v1alpha1.SignJWTRequest{Claims: seg})
			return err
		})
	})
}
