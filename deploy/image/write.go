package image

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ErrLayoutExists is returned when the OCI layout directory already has
// content: appending would leave two images behind one tag.
var ErrLayoutExists = errors.New("image: OCI layout directory is not empty")

// WriteTarball writes img as a `docker save` tarball tagged tag, which
// `docker load`, `podman load` and `kind load image-archive` accept.
func WriteTarball(path, tag string, img v1.Image) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", tag, err)
	}
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return fmt.Errorf("image: write %s: %w", path, err)
	}
	return nil
}

// WriteLayout writes img into a new OCI image layout at dir, annotated
// with tag, for tools that read layouts (skopeo, crane, containerd).
func WriteLayout(dir, tag string, img v1.Image) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%w: %s", ErrLayoutExists, dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return fmt.Errorf("image: layout %s: %w", dir, err)
	}
	return nil
}
