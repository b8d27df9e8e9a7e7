package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
)

// Mode is how the issuer answers for its documents.
type Mode int

const (
	// Normal serves the discovery document and the key set.
	Normal Mode = iota
	// Slow holds every request until the issuer is closed or set back.
	Slow
	// Huge answers the key set with far more bytes than any key set has.
	Huge
	// Garbage answers the documents with bytes that are not JSON.
	Garbage
)

// HugeBytes is how long a Huge answer is.
const HugeBytes = 64 << 20

// Issuer is a running OIDC issuer.
type Issuer struct {
	// URL is where it is served (https://127.0.0.1:port).
	URL string
	// Name is the issuer it announces and signs as ("iss"): URL unless set
	// otherwise before use, for the self-hosted case that kube's
	// discoveryURL exists for (an issuer name that does not resolve to the
	// server; the key set is still at URL).
	Name string
	// CAPEM is the PEM of the CA its serving certificate chains to.
	CAPEM string

	srv  *httptest.Server
	key  *rsa.PrivateKey
	kid  string
	mu   sync.Mutex
	mode Mode
	stop chan struct{}
	// fetches counts requests for the key set, requests all requests.
	fetches, requests int
	// rotations counts Rotate's new keys.
	rotations int
	// hugeSent counts the bytes of Huge answers the client took.
	hugeSent int64
}

// New starts an issuer with a fresh 2048-bit key.
func New() (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	i := &Issuer{key: key, kid: "test-key-1", stop: make(chan struct{})}
	i.srv = httptest.NewUnstartedServer(http.HandlerFunc(i.serve))
	i.srv.StartTLS()
	i.URL = i.srv.URL
	i.Name = i.URL
	i.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw}))
	return i, nil
}

// Close stops the server; held requests end.
func (i *Issuer) Close() {
	i.mu.Lock()
	select {
	case <-i.stop:
	default:
		close(i.stop)
	}
	i.mu.Unlock()
	i.srv.CloseClientConnections()
	i.srv.Close()
}

// SetMode changes how the documents are answered from now on.
func (i *Issuer) SetMode(m Mode) {
	i.mu.Lock()
	i.mode = m
	i.mu.Unlock()
}

// Rotate replaces the issuer's key with a fresh one under a new key id:
// the old key is published no more, and tokens are signed with the new.
func (i *Issuer) Rotate() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.rotations++
	i.key, i.kid = key, fmt.Sprintf("test-key-%d", i.rotations+1)
	i.mu.Unlock()
	return nil
}

// KeyFetches is how many times the key set was asked for.
func (i *Issuer) KeyFetches() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.fetches
}

// Requests is how many requests it was sent, of any path and in any mode.
func (i *Issuer) Requests() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.requests
}

// HugeSent is how many bytes of Huge answers were written to clients
// (what a client read, plus what the connection buffered).
func (i *Issuer) HugeSent() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.hugeSent
}

func (i *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	mode, pub, kid := i.mode, &i.key.PublicKey, i.kid
	i.requests++
	if r.URL.Path == "/keys" {
		i.fetches++
	}
	i.mu.Unlock()
	switch mode {
	case Slow:
		select {
		case <-i.stop:
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	case Garbage:
		w.Write([]byte("<html>not a document</html>"))
		return
	}
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                i.Name,
			"jwks_uri":                              i.URL + "/keys",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	case "/keys":
		w.Header().Set("Content-Type", "application/json")
		if mode == Huge {
			w.Write([]byte(`{"keys":[{"kty":"RSA","n":"`))
			chunk := []byte(strings.Repeat("A", 1<<16))
			for n := 0; n < HugeBytes; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				i.mu.Lock()
				i.hugeSent += int64(len(chunk))
				i.mu.Unlock()
			}
			w.Write([]byte(`"}]}`))
			return
		}
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: kid, Algorithm: "RS256", Use: "sig"}}})
	default:
		http.NotFound(w, r)
	}
}

// Claims are a token's claims; iss, iat, nbf and exp are filled in when
// absent (exp one hour ahead).
type Claims map[string]any

// Sign returns a token of claims signed by the issuer's key.
func (i *Issuer) Sign(c Claims) (string, error) {
	i.mu.Lock()
	key, kid := i.key, i.kid
	i.mu.Unlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return "", err
	}
	now := time.Now()
	all := Claims{"iss": i.Name, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range c {
		all[k] = v
	}
	return jwt.Signed(signer).Claims(map[string]any(all)).CompactSerialize()
}
