package storage

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/trustplane/trustplane/fsm"
)

// AtRest turns one resource's encoded values into the bytes the fsm stores
// and back: kube's value.Transformer for that resource (from an
// EncryptionConfiguration), with the fsm key as authenticated data, as kube
// uses the etcd key. The zero AtRest is identity: values are stored as
// encoded.
//
// It is the one place where stored values are encrypted and decrypted: the
// storage layer (Store), the RBAC cache (Storage.Open) and the signing-key
// store all go through it, so the fsm only ever sees, replicates and
// snapshots the transformed bytes.
type AtRest struct{ t value.Transformer }

// Identity reports whether a is no transformation: values are stored as
// encoded (no encryption configured, or a record never sealed).
func (a AtRest) Identity() bool { return a.t == nil }

// Seal transforms plain, the encoded value of key, for storage. It runs on
// the leader before the value is proposed: encryption draws random nonces,
// which the deterministic fsm must never do.
func (a AtRest) Seal(key fsm.Key, plain []byte) ([]byte, error) {
	if a.t == nil {
		return plain, nil
	}
	out, err := a.t.TransformToStorage(context.Background(), plain, authData(key))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrAtRest, key.Resource, err)
	}
	return out, nil
}

// Open returns the encoded value kv stores. stale means it was not written
// with the first configured provider and key (or not encrypted while one is
// configured): a write should store it again even when it is unchanged,
// which is how keys are rotated.
func (a AtRest) Open(kv *fsm.KV) (plain []byte, stale bool, err error) {
	if a.t == nil {
		return kv.Value, false, nil
	}
	out, stale, err := a.t.TransformFromStorage(context.Background(), kv.Value, authData(kv.Key))
	if err != nil {
		// The message names the key, never the value.
		return nil, false, fmt.Errorf("%w %s %q: %w", ErrAtRest, kv.Key.Resource, kv.Key.Name, err)
	}
	return out, stale, nil
}

// authData is the key as builds before key spaces wrote it (a custom
// key untagged), so that values encrypted then still open. A custom and a
// built-in key with the same group, resource and name therefore share it;
// that is safe because a value is only ever sealed by the leader for the
// key it writes, and no request can move stored bytes between keys.
func authData(key fsm.Key) value.DefaultContext {
	if key.Space == fsm.SpaceCustom {
		key.Space = fsm.SpaceBuiltin
	}
	return value.DefaultContext(key.String())
}

// AtRestWith is the transformation t, for a record that must be sealed by
// a transformer of its own (the encryption keys' record, sealed by the
// keys of the configuration file alone); nil is identity.
func AtRestWith(t value.Transformer) AtRest { return AtRest{t: t} }

// AtRest returns the transformation of the stored values of gr, which need
// not be a served resource.
func (s *Storage) AtRest(gr schema.GroupResource) AtRest {
	if s.transformers == nil {
		return AtRest{}
	}
	return AtRest{t: s.transformers.TransformerForResource(gr)}
}

// secretsResource is what internal records are sealed as.
var secretsResource = schema.GroupResource{Resource: "secrets"}

// InternalAtRest is the transformation of the internal records that hold
// secret material (Config.SealedInternal: the token signing keys, the
// gossip keyring, the node CAs): that of Secrets, so the encryption
// configuration for secrets encrypts them too.
func (s *Storage) InternalAtRest() AtRest { return s.AtRest(secretsResource) }

// AtRestOf is the transformation the stored value of key is sealed with:
// its own resource's; for an internal record of Config.SealedInternal
// that of Secrets, for any other internal record none (Identity). It is
// the one rule that maps a stored value to its transformation, for code
// that handles values of every resource (the RBAC cache, re-encryption).
func (s *Storage) AtRestOf(key fsm.Key) AtRest {
	if key.Space == fsm.SpaceInternal {
		if !s.sealedInternal[key.Resource] {
			return AtRest{}
		}
		return s.InternalAtRest()
	}
	return s.AtRest(schema.GroupResource{Group: key.Group, Resource: key.Resource})
}

// Open returns the encoded value kv stores, whatever resource it belongs to
// (the RBAC cache decodes stored values itself).
func (s *Storage) Open(kv *fsm.KV) ([]byte, error) {
	plain, _, err := s.AtRestOf(kv.Key).Open(kv)
	return plain, err
}
