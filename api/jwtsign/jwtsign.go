package jwtsign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/registry"
)

// Path is where the endpoint is served: POST, any node.
const Path = "/externaljwt/v1alpha1/sign"

// Group is the API group of the RBAC rules that allow signing: verb
// "sign" on "issuers" and "audiences", named by the claims' values.
const Group = "externaljwt.trustplane.io"

// MaxClaimsBytes bounds the claims segment; kube's service account tokens
// are well under 2 KiB.
const MaxClaimsBytes = 16 << 10

// DefaultMaxLifetime is the longest token signed without a
// --service-account-max-token-expiration: a year, kube's extended
// expiration of pod-bound tokens.
const DefaultMaxLifetime = 365 * 24 * time.Hour

// Request is the body of a POST to Path.
type Request struct {
	// Claims is the token's second segment: URL-safe base64, unpadded, of
	// the claims' JSON, exactly as in the token.
	Claims string `json:"claims"`
}

// Response is the answer: the token is Header + "." + Claims + "." +
// Signature.
type Response struct {
	Header    string `json:"header"`
	Signature string `json:"signature"`
	KeyID     string `json:"keyID"`
}

// Signer signs claims segments with the active key (authn.KeyStore).
type Signer interface {
	SignClaims(ctx context.Context, claims string) (header, signature, kid string, err error)
}

// Config is what the endpoint needs.
type Config struct {
	Signer     Signer
	Authorizer authorizer.Authorizer
	// OwnIssuers are this cluster's issuers, never signed here.
	OwnIssuers []string
	// MaxLifetime bounds exp - iat.
	MaxLifetime time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Handler serves Path.
func Handler(cfg Config) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	own := map[string]bool{issuerKey(serviceaccount.LegacyIssuer): true}
	for _, i := range cfg.OwnIssuers {
		own[issuerKey(i)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		resp, err := cfg.sign(req, own)
		if err != nil {
			responsewriters.ErrorNegotiated(err, registry.Codecs, schema.GroupVersion{}, w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	})
}

// issuerKey is the form in which issuers are compared with the cluster's
// own: without surrounding space and trailing slashes, in lower case. A
// relying party that normalised issuers would take such variants for the
// cluster's own, so none of them is signed.
func issuerKey(iss string) string {
	return strings.ToLower(strings.TrimRight(strings.TrimSpace(iss), "/"))
}

// claims are the claims the rules read; everything else is signed as sent.
type claims struct {
	Iss      string
	Exp, Iat int64
}

func (cfg *Config) sign(req *http.Request, own map[string]bool) (*Response, error) {
	var r Request
	dec := json.NewDecoder(io.LimitReader(req.Body, MaxClaimsBytes*2))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body must be {\"claims\": \"<segment>\"}: %v", err))
	}
	if len(r.Claims) > MaxClaimsBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("claims of %d bytes; the limit is %d", len(r.Claims), MaxClaimsBytes))
	}
	raw, err := base64.RawURLEncoding.DecodeString(r.Claims)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != r.Claims {
		return nil, apierrors.NewBadRequest("claims must be URL-safe base64 without padding, exactly as in the token")
	}
	c, auds, err := decodeClaims(raw)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if err := cfg.lifetime(c); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if own[issuerKey(c.Iss)] {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: "issuers"}, c.Iss,
			errors.New("it is this cluster's own issuer, whose tokens only TokenRequest issues"))
	}
	u, ok := genericapirequest.UserFrom(req.Context())
	if !ok {
		return nil, apierrors.NewUnauthorized("Unauthorized")
	}
	check := func(resource, name string) error {
		attrs := authorizer.AttributesRecord{User: u, Verb: "sign", APIGroup: Group, APIVersion: "*", Resource: resource, Name: name, ResourceRequest: true}
		d, reason, err := cfg.Authorizer.Authorize(req.Context(), attrs)
		if d == authorizer.DecisionAllow {
			return nil
		}
		if reason == "" && err != nil {
			reason = err.Error()
		}
		msg := fmt.Sprintf("user %q may not sign for this %s", u.GetName(), strings.TrimSuffix(resource, "s"))
		if reason != "" {
			msg += ": " + reason
		}
		return apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: resource}, name, errors.New(msg))
	}
	if err := check("issuers", c.Iss); err != nil {
		return nil, err
	}
	for _, a := range auds {
		if err := check("audiences", a); err != nil {
			return nil, err
		}
	}
	h, sig, kid, err := cfg.Signer.SignClaims(req.Context(), r.Claims)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("cannot sign: %v", err))
	}
	return &Response{Header: h, Signature: sig, KeyID: kid}, nil
}

// skew is how far the API server's clock may be from this node's.
const skew = 5 * time.Minute

// decodeClaims reads the claims the rules need from the JSON raw: an
// issuer, one or more audiences, and whole-second iat and exp (nbf, when
// present, too). They are read by their exact names, as a JWT library
// that matches names exactly reads them; and since Go's decoders (kube's,
// go-oidc's) match names regardless of case and keep the last of two,
// keys that differ only by case (or are the same twice) are refused
// anywhere in the claims (uniqueKeys): every library then reads the
// issuer, audiences and expiry that were checked here.
func decodeClaims(raw []byte) (*claims, []string, error) {
	if err := uniqueKeys(raw); err != nil {
		return nil, nil, err
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, nil, fmt.Errorf("claims are not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, nil, errors.New("claims are not a single JSON object")
	}
	var c claims
	if err := json.Unmarshal(m["iss"], &c.Iss); err != nil || c.Iss == "" {
		return nil, nil, errors.New("claims need an issuer (iss), a string")
	}
	auds, err := audiences(m["aud"])
	if err != nil {
		return nil, nil, err
	}
	var ok1, ok2 bool
	c.Exp, ok1 = seconds(m["exp"])
	c.Iat, ok2 = seconds(m["iat"])
	if !ok1 || !ok2 {
		return nil, nil, errors.New("claims need iat and exp, whole seconds: tokens signed here expire")
	}
	if nbf, ok := m["nbf"]; ok {
		if n, ok := seconds(nbf); !ok || n > c.Exp {
			return nil, nil, errors.New("nbf must be whole seconds, before exp")
		}
	}
	return &c, auds, nil
}

// audiences reads aud: one string or a list of them, none empty.
func audiences(raw json.RawMessage) ([]string, error) {
	var auds []string
	if len(raw) > 0 && raw[0] == '"' {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, fmt.Errorf("aud: %v", err)
		}
		auds = []string{one}
	} else if err := json.Unmarshal(raw, &auds); err != nil || len(auds) == 0 {
		return nil, errors.New("claims need audiences (aud): a string or a list of strings")
	}
	for _, a := range auds {
		if a == "" {
			return nil, errors.New("an audience (aud) is empty")
		}
	}
	return auds, nil
}

// seconds reads a JSON integer literal: no fraction, exponent or quotes.
func seconds(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// lifetime checks that the token is not expired, was issued about now,
// and lives at most MaxLifetime. Every bound is checked before the
// difference it guards is taken, so no hostile value overflows it.
func (cfg *Config) lifetime(c *claims) error {
	now := cfg.Now().Unix()
	limit := int64(cfg.MaxLifetime / time.Second)
	slack := int64(skew / time.Second)
	switch {
	case c.Exp <= now:
		return errors.New("the token has expired (exp)")
	case c.Iat > c.Exp:
		return errors.New("exp must be after iat")
	case c.Iat > now+slack:
		return errors.New("iat is in the future")
	case c.Iat < now-slack:
		return errors.New("iat is in the past: tokens are signed as they are issued")
	case c.Exp-c.Iat > limit:
		return fmt.Errorf("the token would live %v; the limit is %v", time.Duration(c.Exp-c.Iat)*time.Second, cfg.MaxLifetime)
	}
	return nil
}

// maxDepth bounds how deeply claims may nest.
const maxDepth = 32

// uniqueKeys fails if an object in the JSON raw has two keys that are the
// same under Unicode case folding ("iss" and "ISS" or "iſs", the same key
// twice), as Go's decoders take them for one, or if raw nests deeper than
// maxDepth.
func uniqueKeys(raw []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	// Each open container: the keys seen so far for an object, nil for an
	// array; expectKey says whether the next string of an object is a key.
	type frame struct {
		keys      map[string]string // fold form -> the key as sent
		expectKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claims are not a JSON object: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string) // the decoder has checked an object's grammar
			f := foldKey(k)
			if prev, ok := top.keys[f]; ok {
				if prev == k {
					return fmt.Errorf("claims have the key %q twice", k)
				}
				return fmt.Errorf("claims have the keys %q and %q, which JWT libraries may take for one", prev, k)
			}
			top.keys[f] = k
			top.expectKey = false
			continue
		}
		if top != nil && top.keys != nil {
			top.expectKey = true // this token is a value; a key follows
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]string{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].keys != nil {
				stack[len(stack)-1].expectKey = true
			}
		}
		if len(stack) > maxDepth {
			return fmt.Errorf("claims nest deeper than %d", maxDepth)
		}
	}
}

// foldKey maps every rune of k to the least rune of its Unicode case
// folding orbit, so that keys Go's decoders match to one name map to one
// string.
func foldKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
