package authn

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestClaimsIssuer: only a compact JWT whose unverified "iss" is one of
// the issuers is picked for a catch-up; hostile or malformed tokens are
// not, and nothing panics.
func TestClaimsIssuer(t *testing.T) {
	seg := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	issuers := []string{DefaultIssuer}
	for _, tc := range []struct {
		name  string
		token string
		want  bool
	}{
		{"this cluster's issuer", seg(`{"alg":"ES256"}`) + "." + seg(`{"iss":"`+DefaultIssuer+`"}`) + ".sig", true},
		{"another issuer", seg(`{}`) + "." + seg(`{"iss":"https://elsewhere"}`) + ".sig", false},
		{"no issuer", seg(`{}`) + "." + seg(`{}`) + ".sig", false},
		{"a JSON serialization", `{"payload":"x"}`, false},
		{"two segments", seg(`{}`) + "." + seg(`{"iss":"`+DefaultIssuer+`"}`), false},
		{"four segments", "a.b.c.d", false},
		{"a payload that is not base64", "a.!!!.c", false},
		{"a payload that is not JSON", "a." + seg("not json") + ".c", false},
		{"an issuer that is not a string", "a." + seg(`{"iss":1}`) + ".c", false},
		{"a static token", "static-token-1", false},
		{"empty", "", false},
		{"a large payload", "a." + seg(`{"x":"`+strings.Repeat("y", 1<<16)+`","iss":"`+DefaultIssuer+`"}`) + ".c", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := claimsIssuer(tc.token, issuers); got != tc.want {
				t.Fatalf("claimsIssuer = %v, want %v", got, tc.want)
			}
		})
	}
}
