package encryptionkeys

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"
)

// Transformers are the transformers every stored value goes through: the
// file's, with the data keys in front (transformer); nil when there is no
// file, and nothing is encrypted.
func (s *Store) Transformers() value.ResourceTransformers {
	if s.cfg.File == nil {
		return nil
	}
	return transformers{s}
}

type transformers struct{ s *Store }

func (t transformers) TransformerForResource(gr schema.GroupResource) value.Transformer {
	file := t.s.cfg.File.TransformerForResource(gr)
	return &transformer{s: t.s, file: file, covered: t.s.covers(gr, file)}
}

// covers reports whether the file encrypts gr's values: what its first
// provider makes of a probe is not the probe (identity returns it).
func (s *Store) covers(gr schema.GroupResource, file value.Transformer) bool {
	if c, ok := s.covered.Load(gr); ok {
		return c.(bool)
	}
	probe := []byte("trustplane encryption probe")
	out, err := file.TransformToStorage(context.Background(), probe, value.DefaultContext("probe"))
	c := err == nil && !bytes.Equal(out, probe)
	s.covered.Store(gr, c)
	return c
}

// transformer is one resource's: it reads the set of keys at every call,
// because stores keep their transformer for their lifetime.
type transformer struct {
	s    *Store
	file value.Transformer
	// covered: the file encrypts this resource, so its values are sealed
	// with the active data key once there is one.
	covered bool
}

// TransformToStorage seals with the active data key, or with the file's
// keys while the file's keys are active or the resource is not covered.
func (t *transformer) TransformToStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, error) {
	ks := t.s.current()
	if !t.covered || ks.active == FileKey {
		return t.file.TransformToStorage(ctx, data, dataCtx)
	}
	dek := ks.deks[ks.active]
	if dek == nil {
		return nil, fmt.Errorf("%w: %s, the active key", ErrUnknownKey, ks.active)
	}
	out, err := dek.TransformToStorage(ctx, data, dataCtx)
	if err != nil {
		return nil, err
	}
	prefix := Prefix + ks.active + ":"
	sealed := make([]byte, 0, len(prefix)+len(out))
	return append(append(sealed, prefix...), out...), nil
}

// TransformFromStorage opens a value sealed with any data key this node
// holds, or by the file. A value not sealed the way TransformToStorage
// would seal it now is stale, so a write rewrites it.
func (t *transformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	if id, rest, ok := sealedWith(data); ok {
		dek, ks := t.s.lookup(id)
		if dek == nil {
			return nil, false, fmt.Errorf("%w: %s", ErrUnknownKey, id)
		}
		out, stale, err := dek.TransformFromStorage(ctx, rest, dataCtx)
		return out, stale || !t.covered || id != ks.active, err
	}
	out, stale, err := t.file.TransformFromStorage(ctx, data, dataCtx)
	return out, stale || (t.covered && t.s.current().active != FileKey), err
}

// maxIDBytes bounds the id a value's prefix names (a KeyID is 16).
const maxIDBytes = 64

// sealedWith returns the data key a value is sealed with and the sealed
// bytes after its prefix; false when no data key sealed it.
func sealedWith(data []byte) (id string, rest []byte, ok bool) {
	if !bytes.HasPrefix(data, []byte(Prefix)) {
		return "", nil, false
	}
	after := data[len(Prefix):]
	i := bytes.IndexByte(after[:min(len(after), maxIDBytes+1)], ':')
	if i <= 0 {
		return "", nil, false
	}
	return string(after[:i]), after[i+1:], true
}

// SealedWith names the key a stored value is sealed with: a data key's id,
// FileKey for a value the file's providers encrypted, "" for a value that
// is not encrypted.
func SealedWith(v []byte) string {
	if id, _, ok := sealedWith(v); ok {
		return id
	}
	if bytes.HasPrefix(v, []byte(encPrefix)) {
		return FileKey
	}
	return ""
}
