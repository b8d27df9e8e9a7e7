package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageTarball returns the image tarball to test: $TRUSTPLANE_IMAGE_TAR
// (make test-deploy passes the one make image wrote), or one built here
// from a fresh static build of ./cmd/trustplane.
func imageTarball(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TRUSTPLANE_IMAGE_TAR"); p != "" {
		return p
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "trustplane")
	build := exec.Command("go", "build", "-o", bin, "./cmd/trustplane")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(Options{Binary: b, Arch: runtime.GOARCH, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "image.tar")
	if err := WriteTarball(p, "trustplane:test", img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImageRuns opens the image tarball as a runtime would, checks its
// config and filesystem, extracts /trustplane from the layer and runs it:
// `version`, then `serve` with the image's own environment (the data dir
// and listen address moved to loopback and a temp dir), as the image's
// non-root user when the test may switch users, until /readyz answers.
func TestImageRuns(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is a Linux image")
	}
	img, err := tarball.ImageFromPath(imageTarball(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, img, nil)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != runtime.GOARCH {
		t.Skipf("image is %s, this machine %s", cf.Architecture, runtime.GOARCH)
	}

	// Not t.TempDir: its parent is private to the test's user, and the
	// node may run as the image's user.
	dir, err := os.MkdirTemp("", "trustplane-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "trustplane")
	extractFile(t, img, strings.TrimPrefix(BinaryPath, "/"), bin)

	asUser := os.Geteuid() == 0 // root may drop to the image's user
	cred := func(c *exec.Cmd) {
		if asUser {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: NonRootUID, Gid: NonRootGID}}
		}
	}
	if asUser {
		// The user must be able to reach its binary and data dir.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	version := exec.Command(bin, "version")
	cred(version)
	out, err := version.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "trustplane v") {
		t.Fatalf("trustplane version: %v\n%s", err, out)
	}

	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if asUser {
		if err := os.Chown(data, NonRootUID, NonRootGID); err != nil {
			t.Fatal(err)
		}
	}
	listen := freeAddr(t)
	env := []string{"PATH=/nonexistent"}
	for _, e := range cf.Config.Env {
		switch {
		case strings.HasPrefix(e, "TRUSTPLANE_DATA_DIR="):
			e = "TRUSTPLANE_DATA_DIR=" + data
		case strings.HasPrefix(e, "TRUSTPLANE_LISTEN="):
			e = "TRUSTPLANE_LISTEN=" + listen
		}
		env = append(env, e)
	}
	env = append(env, "TRUSTPLANE_RAFT_ADDR="+freeAddr(t), "TRUSTPLANE_GOSSIP_ADDR="+freeAddr(t))
	args := append(append([]string(nil), cf.Config.Entrypoint[1:]...), cf.Config.Cmd...)
	var logs bytes.Buffer
	serve := exec.Command(bin, args...)
	serve.Env = env
	serve.Dir = "/"
	serve.Stdout, serve.Stderr = &logs, &logs
	cred(serve)
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		if code, body := readyz(ctx, data, listen); code == http.StatusOK {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("/readyz never answered 200 (last %d %q); node output:\n%s", code, body, logs.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited: %v\n%s", err, logs.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := os.Stat(filepath.Join(data, "admin.kubeconfig")); err != nil {
		// It is written right after readiness; give it the same deadline.
		for ctx.Err() == nil {
			if _, err = os.Stat(filepath.Join(data, "admin.kubeconfig")); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("no admin.kubeconfig in the data dir: %v\n%s", err, logs.String())
		}
	}
}

// readyz asks the node for /readyz over TLS verified with the cluster CA
// the node generated in its data dir; 0 until that CA exists.
func readyz(ctx context.Context, data, addr string) (int, string) {
	caPEM, err := os.ReadFile(filepath.Join(data, "pki", "ca.crt"))
	if err != nil {
		return 0, err.Error()
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}

// extractFile copies one regular file out of img's flattened filesystem,
// as a runtime would unpack it.
func extractFile(t *testing.T, img v1.Image, name, to string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("no %s in the image", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != name || h.Typeflag != tar.TypeReg {
			continue
		}
		f, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode)&0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
