package authn_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiserver/pkg/server/options/encryptionconfig"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// secretsAtRest is the registry's transformation of secrets under an
// aescbc configuration with keys (name → base64 key), first first.
func secretsAtRest(t *testing.T, keys ...[2]string) storage.AtRest {
	t.Helper()
	yaml := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n"
	for _, k := range keys {
		yaml += fmt.Sprintf("      - name: %s\n        secret: %s\n", k[0], k[1])
	}
	path := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "")
	if err != nil {
		t.Fatal(err)
	}
	stor, err := storage.New(&storage.Config{Transformers: encryptionconfig.StaticTransformers(loaded.Transformers)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(stor, nil, nil)
	return reg.InternalAtRest()
}

func aesKey(t *testing.T, name string) [2]string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return [2]string{name, base64.StdEncoding.EncodeToString(b)}
}

func storedKeys(t *testing.T, l *localLog) []*fsm.KV {
	t.Helper()
	res, err := l.f.List(fsm.Prefix{Space: authn.FirstKey.Space, Resource: authn.FirstKey.Resource}, fsm.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.KVs
}

func sign(t *testing.T, k *authn.KeyStore) string {
	t.Helper()
	tok, err := k.Generator("https://issuer.example").GenerateToken(context.Background(), mustClaims(), struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestKeysEncryptedAndReencrypted: stored keys carry the first key's
// prefix and no plaintext; with a new first key Reencrypt rewrites them
// once, after which the old key can go.
func TestKeysEncryptedAndReencrypted(t *testing.T) {
	ctx := context.Background()
	l := newLocalLog()
	k1, k2 := aesKey(t, "k1"), aesKey(t, "k2")
	ks := authn.NewKeyStore(l, l.f, secretsAtRest(t, k1))
	if err := ks.EnsureKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	tok := sign(t, ks)
	for _, kv := range storedKeys(t, l) {
		if !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:k1:")) || bytes.Contains(kv.Value, []byte("pkcs8")) {
			t.Fatalf("stored key %s: %q", kv.Key.Name, kv.Value)
		}
	}

	rotated := authn.NewKeyStore(l, l.f, secretsAtRest(t, k2, k1))
	if err := rotated.Reencrypt(ctx); err != nil {
		t.Fatal(err)
	}
	after := storedKeys(t, l)
	for _, kv := range after {
		if !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:k2:")) {
			t.Fatalf("key %s not re-encrypted: %q", kv.Key.Name, kv.Value[:24])
		}
	}
	if err := rotated.Reencrypt(ctx); err != nil {
		t.Fatal(err)
	}
	for i, kv := range storedKeys(t, l) {
		if kv.ModRevision != after[i].ModRevision {
			t.Fatalf("Reencrypt wrote key %s again with nothing stale", kv.Key.Name)
		}
	}

	only2 := authn.NewKeyStore(l, l.f, secretsAtRest(t, k2))
	if kidOf(t, sign(t, only2)) != kidOf(t, tok) {
		t.Fatal("the re-encrypted keys sign with another key")
	}
	if keys := only2.PublicKeys().GetPublicKeys(ctx, ""); len(keys) != 2 {
		t.Fatalf("%d verifying keys after re-encryption, want 2", len(keys))
	}
}

// TestRetire: retiring leaves the current key alone, tombstones the rest
// (FirstKey keeps existing), and a later rotation takes a new generation.
func TestRetire(t *testing.T) {
	ctx := context.Background()
	l := newLocalLog()
	ks := authn.NewKeyStore(l, l.f, storage.AtRest{})
	if err := ks.EnsureKey(ctx); err != nil {
		t.Fatal(err)
	}
	oldKid := kidOf(t, sign(t, ks))
	newKid, err := ks.Rotate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, retired, err := ks.Retire(ctx)
	if err != nil || cur != newKid || len(retired) != 1 || retired[0] != oldKid {
		t.Fatalf("Retire: %q %v %v, want %q [%q]", cur, retired, err, newKid, oldKid)
	}
	if keys := ks.PublicKeys().GetPublicKeys(ctx, oldKid); len(keys) != 0 {
		t.Fatal("the retired key still verifies")
	}
	if keys := ks.PublicKeys().GetPublicKeys(ctx, ""); len(keys) != 1 || keys[0].KeyID != newKid {
		t.Fatalf("verifying keys %v, want only %s", keys, newKid)
	}
	if kv, _, _ := l.f.Get(authn.FirstKey, 0); kv == nil || bytes.Contains(kv.Value, []byte("pkcs8")) {
		t.Fatalf("FirstKey after retiring: %v", kv)
	}
	if _, again, err := ks.Retire(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second Retire: %v %v", again, err)
	}
	if _, err := ks.Rotate(ctx); err != nil || keyCount(t, l) != 3 {
		t.Fatalf("rotation after retiring: %v, %d keys stored", err, keyCount(t, l))
	}
}
