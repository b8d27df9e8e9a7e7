package registry

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// encryptionConfig writes an EncryptionConfiguration for secrets whose
// aescbc provider has keys, first one first, then identity, and returns
// the registry configuration with its transformers.
func encryptionConfig(t *testing.T, keys ...string) *storage.Config {
	t.Helper()
	return encryptionConfigOf(t, "aescbc", keys...)
}

// encryptionConfigOf is encryptionConfig with provider instead of aescbc.
func encryptionConfigOf(t *testing.T, provider string, keys ...string) *storage.Config {
	t.Helper()
	yaml := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - " + provider + ":\n      keys:\n"
	for _, k := range keys {
		yaml += fmt.Sprintf("      - name: %s\n        secret: %s\n", k, testKey(k))
	}
	yaml += "  - identity: {}\n"
	path := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), path, false, "")
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Config{FreshWait: testFreshWait, Transformers: encryptionconfig.StaticTransformers(loaded.Transformers)}
}

var testKeys = map[string]string{}

func testKey(name string) string {
	if k, ok := testKeys[name]; ok {
		return k
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	testKeys[name] = base64.StdEncoding.EncodeToString(b)
	return testKeys[name]
}

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

func TestAtRest(t *testing.T) {
	e := newEnv(t)
	value := make([]byte, 24)
	_, _ = rand.Read(value)
	ctx := e.in("default")
	key := fsm.Key{Resource: "secrets", Namespace: "default", Name: "s"}
	stored := func(t *testing.T) *fsm.KV {
		t.Helper()
		kv, _, err := e.b.Get(key, 0)
		if err != nil || kv == nil {
			t.Fatalf("stored secret: %v %v", kv, err)
		}
		return kv
	}
	read := func(t *testing.T, reg *Registry) *api.Secret {
		t.Helper()
		out, err := reg.stores[secretsGVR].Get(ctx, "s", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := out.(*api.Secret)
		if !bytes.Equal(s.Data["v"], value) {
			t.Fatalf("secret reads back %q", s.Data["v"])
		}
		return s
	}
	replace := func(t *testing.T, reg *Registry) *api.Secret {
		t.Helper()
		out, err := reg.stores[secretsGVR].Update(ctx, "s", rest.DefaultUpdatedObjectInfo(read(t, reg)), false)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*api.Secret)
	}

	one := newRegistry(t, encryptionConfig(t, "key1"), e.b, CoreResources())
	created, err := one.stores[secretsGVR].Create(ctx, &api.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, Data: map[string][]byte{"v": value},
	}, false)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the first provider's first key encrypts, with kube's prefix", func(t *testing.T) {
		kv := stored(t)
		if !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key1:")) || bytes.Contains(kv.Value, value) {
			t.Fatalf("stored value %q", kv.Value)
		}
		read(t, one)
	})

	t.Run("the key is authenticated data: a value moved to another key does not decrypt", func(t *testing.T) {
		// aescbc authenticates nothing; aesgcm and secretbox do.
		gcm := newRegistry(t, encryptionConfigOf(t, "aesgcm", "gcm1"), e.b, CoreResources()).InternalAtRest()
		plain := []byte("k8s\x00value")
		sealed, err := gcm.Seal(key, plain)
		if err != nil || !bytes.HasPrefix(sealed, []byte("k8s:enc:aesgcm:v1:gcm1:")) {
			t.Fatalf("Seal: %q %v", sealed, err)
		}
		if got, _, err := gcm.Open(&fsm.KV{Key: key, Value: sealed}); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("Open: %q %v", got, err)
		}
		moved := fsm.Key{Resource: "secrets", Namespace: "default", Name: "other"}
		if _, _, err := gcm.Open(&fsm.KV{Key: moved, Value: sealed}); err == nil {
			t.Fatal("a value decrypted under another key")
		}
	})

	t.Run("without the configuration the encrypted value is an internal error", func(t *testing.T) {
		_, err := e.reg.stores[secretsGVR].Get(ctx, "s", &metav1.GetOptions{})
		if !apierrors.IsInternalError(err) {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("an unchanged update with the current key writes nothing", func(t *testing.T) {
		first := replace(t, one) // stores the defaults decoding added (type Opaque)
		if rvOf(t, first.ResourceVersion) < rvOf(t, created.(*api.Secret).ResourceVersion) {
			t.Fatalf("resourceVersion went back to %s", first.ResourceVersion)
		}
		if out := replace(t, one); out.ResourceVersion != first.ResourceVersion {
			t.Fatalf("resourceVersion %s, want %s", out.ResourceVersion, first.ResourceVersion)
		}
	})

	two := newRegistry(t, encryptionConfig(t, "key2", "key1"), e.b, CoreResources())
	t.Run("a new first key reads old values, and an unchanged update re-encrypts", func(t *testing.T) {
		before := stored(t).ModRevision
		out := replace(t, two)
		if rvOf(t, out.ResourceVersion) <= before {
			t.Fatalf("resourceVersion %s: the stale value was not written", out.ResourceVersion)
		}
		if kv := stored(t); !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key2:")) {
			t.Fatalf("stored value %q", kv.Value)
		}
		if again := replace(t, two); again.ResourceVersion != out.ResourceVersion {
			t.Fatal("an update with the current key wrote again")
		}
	})

	t.Run("with the old key removed the value still reads", func(t *testing.T) {
		read(t, newRegistry(t, encryptionConfig(t, "key2"), e.b, CoreResources()))
	})

	t.Run("Open decrypts for any stored resource", func(t *testing.T) {
		plain, err := two.Open(stored(t))
		if err != nil || bytes.HasPrefix(plain, []byte("k8s:enc:")) {
			t.Fatalf("Open: %q %v", plain, err)
		}
	})
}
