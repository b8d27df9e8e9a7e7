package chart

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// chartDir is the chart, relative to this package.
	chartDir = "trustplane"
	// releaseName and namespace are what the tests render with.
	releaseName = "trustplane"
	namespace   = "tp"
	// kubeVersion is the cluster version helm renders and lints for (it
	// defaults to v1.20 when built without the release ldflags).
	kubeVersion = "1.33.0"
)

// Binaries built once in TestMain.
var (
	helmBin       string
	trustplaneBin string
)

// TestMain builds helm and trustplane (in parallel) before the tests.
// Both builds skip linking when nothing changed, which is most of their
// cost: helm comes from `go tool -n helm` (go caches tool executables),
// trustplane is built into a directory of the user's cache kept per
// checkout, where `go build -o` finds the previous, up-to-date binary.
func TestMain(m *testing.M) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir, err := binCacheDir(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	trustplaneBin = filepath.Join(binDir, "trustplane")
	var wg sync.WaitGroup
	var helmErr, tpErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		// helm is this module's tool (go.mod's tool line).
		cmd := exec.Command("go", "tool", "-n", "helm")
		cmd.Dir = ".."
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("go tool -n helm: %w", err)
			return
		}
		helmBin = strings.TrimSpace(string(out))
	}()
	go func() {
		defer wg.Done()
		cmd := exec.Command("go", "build", "-o", trustplaneBin, "./cmd/trustplane")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			tpErr = fmt.Errorf("go build ./cmd/trustplane: %w\n%s", err, out)
		}
	}()
	wg.Wait()
	if err := errors.Join(helmErr, tpErr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := os.Stat(helmBin); err != nil {
		fmt.Fprintf(os.Stderr, "go tool -n helm named %q: %v\n", helmBin, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// binCacheDir is where the trustplane binary of the checkout at root is
// built: one directory per checkout, so that parallel worktrees never
// share a binary.
func binCacheDir(root string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(base, "trustplane-deploy-tests", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// helm runs the built helm with args, with its caches and configuration
// in a temporary home, and returns stdout, stderr and the error.
func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HOME="+home,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// valuesFile is a values file of testdata/.
func valuesFile(name string) string { return filepath.Join("testdata", name) }

// render runs helm template with the given values files and --set
// arguments and returns the manifests; rendering errors fail the test.
func render(t *testing.T, valuesFiles []string, sets ...string) []manifest {
	t.Helper()
	out, stderr, err := template(t, valuesFiles, sets...)
	if err != nil {
		t.Fatalf("helm template %v %v: %v\n%s", valuesFiles, sets, err, stderr)
	}
	return splitManifests(t, out)
}

// template runs helm template and returns its output as is.
func template(t *testing.T, valuesFiles []string, sets ...string) (string, string, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// manifest is one rendered document: its kind and name, and its YAML.
type manifest struct {
	APIVersion string
	Kind       string
	Name       string
	YAML       []byte
}

func (m manifest) String() string { return m.Kind + "/" + m.Name }

// splitManifests splits helm's output into documents, skipping empty ones.
func splitManifests(t *testing.T, out string) []manifest {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	var ms []manifest
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			if len(bytes.TrimSpace(stripComments(doc))) > 0 {
				t.Fatalf("rendered document without a kind:\n%s", doc)
			}
			continue
		}
		ms = append(ms, manifest{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, YAML: doc})
	}
	if len(ms) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return ms
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// decodeStrict decodes m into obj, refusing unknown fields: a misspelt or
// misplaced field in a template fails here instead of being dropped by
// the API server.
func decodeStrict(t *testing.T, m manifest, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(m.YAML, obj); err != nil {
		t.Fatalf("%s does not decode strictly into %T: %v\n%s", m, obj, err, m.YAML)
	}
}

// only returns the one manifest of kind (and name, if not empty).
func only(t *testing.T, ms []manifest, kind, name string) manifest {
	t.Helper()
	var found []manifest
	for _, m := range ms {
		if m.Kind == kind && (name == "" || m.Name == name) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s %q, rendered %d: %v", kind, name, len(found), ms)
	}
	return found[0]
}
