package authn

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrClaimsSegment is a claims segment that is not canonical unpadded
// URL-safe base64: the signature covers the segment's bytes, so only the
// one encoding of the claims is signed.
var ErrClaimsSegment = errors.New("claims must be URL-safe base64 without padding, exactly as in the token")

// SignClaims signs a JWT whose claims another API server built (kube's
// ExternalJWTSigner): claims is the token's second segment, URL-safe
// base64 of the claims' JSON, exactly as it will appear. It returns the
// first (header: alg, kid and typ only, as kube requires) and last
// (signature) segments, signed with the active key, and the key's id.
// The private key never leaves the store: only the signature does.
//
// SignClaims checks the encoding only; which claims may be signed is the
// caller's rule (api/jwtsign).
func (k *KeyStore) SignClaims(ctx context.Context, claims string) (header, signature, kid string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(claims)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != claims {
		return "", "", "", ErrClaimsSegment
	}
	s, err := k.keys()
	if err != nil {
		return "", "", "", err
	}
	if s.current == nil {
		return "", "", "", ErrNoSigningKey
	}
	if kid, err = keyID(ctx, s.current); err != nil {
		return "", "", "", err
	}
	h, err := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}{"ES256", kid, "JWT"})
	if err != nil {
		return "", "", "", err
	}
	header = base64.RawURLEncoding.EncodeToString(h)
	sig, err := es256(s.current, header+"."+claims)
	if err != nil {
		return "", "", "", fmt.Errorf("authn: signing: %w", err)
	}
	return header, base64.RawURLEncoding.EncodeToString(sig), kid, nil
}

// es256 is JWS ES256 (RFC 7518 §3.4): the P-256 signature of input's
// SHA-256, r and s as 32 big-endian bytes each.
func es256(key *ecdsa.PrivateKey, input string) ([]byte, error) {
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out, nil
}
