package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/certs"
)

// TestCertsInitSecret: `trustplane certs init --secret` creates a Secret
// whose keys form a CA directory a node accepts; a second run leaves it
// exactly as it is, and an incomplete Secret of that name is refused and
// left alone too. The API is a trustplane node, driven through
// --kubeconfig (in a pod the in-cluster configuration is used).
func TestCertsInitSecret(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	initSecret := func(name string) (string, string, error) {
		return runBin(t, nil, "certs", "init", "--secret", name, "--namespace", "default", "--kubeconfig", n.kubeconfigPath())
	}

	out, stderr, err := initSecret("tp-ca")
	if err != nil {
		t.Fatalf("certs init --secret: %v\n%s", err, stderr)
	}
	if strings.Contains(out+stderr, "PRIVATE KEY") {
		t.Fatalf("certs init --secret printed key material:\n%s%s", out, stderr)
	}
	first, err := cs.CoreV1().Secrets("default").Get(ctx, "tp-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range first.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"ca.crt", "ca.key", "gossip.key", "node-ca.crt", "node-ca.key"}; !slices.Equal(keys, want) {
		t.Fatalf("Secret keys %v, want %v", keys, want)
	}
	// The Secret's keys are a CA directory: what the chart mounts as --ca-dir.
	dir := t.TempDir()
	for k, v := range first.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clusterCA, err := certs.LoadCA(dir)
	if err != nil {
		t.Fatalf("cluster CA from the Secret: %v", err)
	}
	nodeCA, err := certs.LoadNodeCA(dir)
	if err != nil {
		t.Fatalf("node CA from the Secret: %v", err)
	}
	if clusterCA.Cert.Equal(nodeCA.Cert) {
		t.Fatal("the cluster CA and the node CA are the same certificate")
	}

	t.Run("a second run keeps the Secret", func(t *testing.T) {
		out, stderr, err := initSecret("tp-ca")
		if err != nil || !strings.Contains(out, "left as it is") {
			t.Fatalf("second run: %v\n%s%s", err, out, stderr)
		}
		again, err := cs.CoreV1().Secrets("default").Get(ctx, "tp-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if again.ResourceVersion != first.ResourceVersion {
			t.Fatalf("the Secret was written again: resourceVersion %s, then %s", first.ResourceVersion, again.ResourceVersion)
		}
	})
	t.Run("an incomplete Secret is refused and kept", func(t *testing.T) {
		n.mustKubectl("create", "secret", "generic", "partial", "-n", "default", "--from-literal=ca.crt=not-a-ca")
		before, err := cs.CoreV1().Secrets("default").Get(ctx, "partial", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, stderr, err := initSecret("partial")
		if err == nil || !strings.Contains(stderr, "lacks CA files") || !strings.Contains(stderr, "ca.key") {
			t.Fatalf("incomplete Secret: err %v\n%s%s", err, out, stderr)
		}
		after, err := cs.CoreV1().Secrets("default").Get(ctx, "partial", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Fatal("the incomplete Secret was changed")
		}
	})
	t.Run("--dir and --secret together are refused", func(t *testing.T) {
		_, stderr, err := runBin(t, nil, "certs", "init", "--dir", t.TempDir(), "--secret", "x")
		if err == nil || !strings.Contains(stderr, "not both") {
			t.Fatalf("err %v\n%s", err, stderr)
		}
	})
}
