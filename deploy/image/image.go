package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"embed"
	"errors"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rootfs holds the files both builds copy in verbatim (the Dockerfile
// COPYs the same directory), so the user database cannot drift.
//
//go:embed rootfs/etc/passwd rootfs/etc/group
var rootfs embed.FS

var (
	// ErrNotStatic is returned for a binary that needs a dynamic loader:
	// the image has no libc, so it could never start.
	ErrNotStatic = errors.New("image: binary is dynamically linked; build it with CGO_ENABLED=0")
	// ErrWrongArch is returned when the binary's machine is not the
	// image's architecture; the container would fail with "exec format
	// error" on the node, far from the build that caused it.
	ErrWrongArch = errors.New("image: binary does not match the image architecture")
	// ErrNotELF is returned for anything but a Linux ELF executable.
	ErrNotELF = errors.New("image: binary is not an ELF executable")
)

// Options say what goes into an image.
type Options struct {
	// Binary is the trustplane executable: static, Linux, for Arch.
	Binary []byte
	// Arch is the GOARCH the binary was built for (amd64, arm64).
	Arch string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Created is the image's creation time and every entry's mtime; the
	// zero value means the Unix epoch, so builds are reproducible.
	Created time.Time
}

var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// Build returns trustplane's image for o. It checks the binary first:
// an image that cannot start must not be built.
func Build(o Options) (v1.Image, error) {
	if err := checkBinary(o.Binary, o.Arch); err != nil {
		return nil, err
	}
	created := o.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	layerTar, err := rootLayer(o.Binary, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "trustplane deploy/image", Comment: "static trustplane binary, non-root user, data volume"},
	})
	if err != nil {
		return nil, fmt.Errorf("image: append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Created = v1.Time{Time: created}
	cf.Config = configOf(DefaultSpec(), o.Version)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

func configOf(s Spec, version string) v1.Config {
	set := func(keys []string) map[string]struct{} {
		m := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			m[k] = struct{}{}
		}
		return m
	}
	return v1.Config{
		User:         s.User,
		Entrypoint:   s.Entrypoint,
		Cmd:          s.Cmd,
		Env:          s.Env,
		ExposedPorts: set(s.ExposedPorts),
		Volumes:      set(s.Volumes),
		WorkingDir:   s.WorkingDir,
		Labels: map[string]string{
			"org.opencontainers.image.title":       "trustplane",
			"org.opencontainers.image.description": "Kubernetes-compatible identity and certificate API on Raft",
			"org.opencontainers.image.version":     version,
		},
	}
}

// SpecOf reads the runtime spec back out of an image config, so tests can
// compare a built image with DefaultSpec and with the Dockerfile.
func SpecOf(c v1.Config) Spec {
	keys := func(m map[string]struct{}) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	return Spec{
		User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env,
		ExposedPorts: keys(c.ExposedPorts), Volumes: keys(c.Volumes), WorkingDir: c.WorkingDir,
	}.normalized()
}

func checkBinary(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotELF, err)
	}
	defer f.Close()
	want, ok := elfMachine[arch]
	if !ok {
		return fmt.Errorf("%w: unknown architecture %q", ErrWrongArch, arch)
	}
	if f.Machine != want {
		return fmt.Errorf("%w: binary is %s, image is %s", ErrWrongArch, f.Machine, arch)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w: ELF type %s", ErrNotELF, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return ErrNotStatic
		}
	}
	return nil
}

// rootLayer is the image's only layer, entries in a fixed order with
// fixed owners and times.
func rootLayer(bin []byte, mtime time.Time) ([]byte, error) {
	passwd, err := rootfs.ReadFile("rootfs/etc/passwd")
	if err != nil {
		return nil, err
	}
	group, err := rootfs.ReadFile("rootfs/etc/group")
	if err != nil {
		return nil, err
	}
	type entry struct {
		name     string
		mode     int64
		uid, gid int
		body     []byte
		dir      bool
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: group},
		{name: "etc/passwd", mode: 0o644, body: passwd},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: BinaryPath[1:], mode: 0o755, body: bin},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		// The node refuses a data directory others can read (at-rest
		// rules), so it is private to the user from the start.
		{name: DataDir[1:] + "/", mode: 0o700, uid: NonRootUID, gid: NonRootGID, dir: true},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("image: layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
