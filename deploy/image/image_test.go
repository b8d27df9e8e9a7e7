package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// fakeELF is the smallest ELF64 executable header debug/elf accepts: one
// program header, PT_INTERP when dynamic is set. Enough for Build's
// checks without compiling anything.
func fakeELF(t *testing.T, m elf.Machine, dynamic bool) []byte {
	t.Helper()
	var b bytes.Buffer
	le := binary.LittleEndian
	hdr := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	if err := binary.Write(&b, le, hdr); err != nil {
		t.Fatal(err)
	}
	prog := elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X)}
	if dynamic {
		prog.Type = uint32(elf.PT_INTERP)
	}
	if err := binary.Write(&b, le, prog); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestBuildChecksTheBinary(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  []byte
		arch string
		want error
	}{
		{"static amd64", fakeELF(t, elf.EM_X86_64, false), "amd64", nil},
		{"static arm64", fakeELF(t, elf.EM_AARCH64, false), "arm64", nil},
		{"dynamic", fakeELF(t, elf.EM_X86_64, true), "amd64", ErrNotStatic},
		{"arm64 binary in an amd64 image", fakeELF(t, elf.EM_AARCH64, false), "amd64", ErrWrongArch},
		{"unknown arch", fakeELF(t, elf.EM_X86_64, false), "vax", ErrWrongArch},
		{"a shell script", []byte("#!/bin/sh\nexec trustplane\n"), "amd64", ErrNotELF},
		{"empty", nil, "amd64", ErrNotELF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(Options{Binary: tc.bin, Arch: tc.arch})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Build: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBuildIsReproducible(t *testing.T) {
	bin := fakeELF(t, elf.EM_X86_64, false)
	digest := func(o Options) v1.Hash {
		img, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := digest(Options{Binary: bin, Arch: "amd64", Version: "v1"})
	if b := digest(Options{Binary: bin, Arch: "amd64", Version: "v1"}); a != b {
		t.Fatalf("two builds of one binary: %s and %s", a, b)
	}
	if c := digest(Options{Binary: bin, Arch: "amd64", Version: "v1", Created: time.Unix(1700000000, 0)}); c == a {
		t.Fatal("a different creation time gave the same digest")
	}
	other := append(append([]byte(nil), bin...), 0)
	if d := digest(Options{Binary: other, Arch: "amd64", Version: "v1"}); d == a {
		t.Fatal("a different binary gave the same digest")
	}
}

// TestImageConfigAndLayer opens a built image the way a runtime would and
// checks what the chart relies on: who it runs as, what it runs, and that
// the data directory belongs to that user.
func TestImageConfigAndLayer(t *testing.T) {
	bin := fakeELF(t, elf.EM_X86_64, false)
	img, err := Build(Options{Binary: bin, Arch: "amd64", Version: "v9"})
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, img, bin)
}

// checkImage checks img's config against DefaultSpec and its filesystem
// entry by entry; bin, unless nil, is the binary it must carry.
func checkImage(t *testing.T, img v1.Image, bin []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" {
		t.Errorf("os %q", cf.OS)
	}
	if got, want := SpecOf(cf.Config), DefaultSpec().normalized(); !reflect.DeepEqual(got, want) {
		t.Errorf("config:\n got %s\nwant %s", got, want)
	}
	if u := cf.Config.User; u == "" || u == "0" || u == "root" || u[:2] == "0:" {
		t.Errorf("runs as root: user %q", u)
	}
	if layers, err := img.Layers(); err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	type file struct {
		mode     int64
		uid, gid int
	}
	want := map[string]file{
		"etc":                {0o755, 0, 0},
		"etc/group":          {0o644, 0, 0},
		"etc/passwd":         {0o644, 0, 0},
		"tmp":                {0o1777, 0, 0},
		"trustplane":         {0o755, 0, 0},
		"var":                {0o755, 0, 0},
		"var/lib":            {0o755, 0, 0},
		"var/lib/trustplane": {0o700, NonRootUID, NonRootGID},
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// Extract reports directories without their trailing slash.
		h.Name = strings.TrimSuffix(h.Name, "/")
		w, ok := want[h.Name]
		if !ok {
			t.Errorf("unexpected entry %s", h.Name)
			continue
		}
		seen[h.Name] = true
		if got := (file{h.Mode & 0o7777, h.Uid, h.Gid}); got != w {
			t.Errorf("%s: mode %o uid %d gid %d, want mode %o uid %d gid %d", h.Name, got.mode, got.uid, got.gid, w.mode, w.uid, w.gid)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "trustplane":
			if bin != nil && !bytes.Equal(body, bin) {
				t.Errorf("the image's /trustplane differs from the binary (%d bytes, want %d)", len(body), len(bin))
			}
		case "etc/passwd":
			if !bytes.Contains(body, []byte("nonroot:x:65532:65532:")) {
				t.Errorf("/etc/passwd has no nonroot user:\n%s", body)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("missing entry %s", name)
		}
	}
}
