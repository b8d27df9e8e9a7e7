package authn_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	jose "gopkg.in/go-jose/go-jose.v2"

	"github.com/trustplane/trustplane/api/authn"
)

// TestSignClaims: a claims segment signed by the key store makes a token
// that verifies with the key its header names, whose claims are the
// segment's bytes; a non-canonical segment is refused, and a node without
// a key refuses to sign.
func TestSignClaims(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	seg := base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://ref.example","aud":["x"],"sub":"system:serviceaccount:a:b","iat":1,"exp":2}`))
	h, sig, kid, err := w.keys.SignClaims(ctx, seg)
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]string
	hb, _ := base64.RawURLEncoding.DecodeString(h)
	if err := json.Unmarshal(hb, &header); err != nil || len(header) != 3 || header["alg"] != "ES256" || header["typ"] != "JWT" || header["kid"] != kid {
		t.Fatalf("header %s: want alg, kid and typ only", hb)
	}
	tok, err := jose.ParseSigned(h + "." + seg + "." + sig)
	if err != nil {
		t.Fatal(err)
	}
	keys := w.keys.PublicKeys().GetPublicKeys(ctx, kid)
	if len(keys) != 1 {
		t.Fatalf("no public key for kid %s", kid)
	}
	payload, err := tok.Verify(keys[0].PublicKey)
	if err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	if base64.RawURLEncoding.EncodeToString(payload) != seg {
		t.Fatal("signed claims differ from the segment")
	}

	for _, bad := range []string{seg + "=", "a+b/", "!!", "QR" /* non-zero trailing bits: "QQ" is canonical */, seg + " "} {
		if _, _, _, err := w.keys.SignClaims(ctx, bad); !errors.Is(err, authn.ErrClaimsSegment) {
			t.Errorf("segment %q: error %v, want ErrClaimsSegment", bad, err)
		}
	}
	empty := newWorldKeyed(t, false, nil)
	if _, _, _, err := empty.keys.SignClaims(ctx, seg); !errors.Is(err, authn.ErrNoSigningKey) {
		t.Fatalf("without a key: %v", err)
	}
}

// BenchmarkSignClaims is the key store's share of one ExternalJWTSigner
// Sign: decode check, key id, header, one P-256 signature.
func BenchmarkSignClaims(b *testing.B) {
	w := newWorld(b, nil)
	ctx := context.Background()
	seg := base64.RawURLEncoding.EncodeToString([]byte(`{"aud":["https://ref.example"],"exp":1900000000,"iat":1800000000,"iss":"https://ref.example","kubernetes.io":{"namespace":"default","serviceaccount":{"name":"default","uid":"0b4f4a2c-5a3c-4c39-8a36-0e2f0c1d2e3f"}},"nbf":1800000000,"sub":"system:serviceaccount:default:default"}`))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := w.keys.SignClaims(ctx, seg); err != nil {
			b.Fatal(err)
		}
	}
}
