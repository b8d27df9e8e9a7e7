package authn_test

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/api/authn"
)

// FuzzBearerToken sends an arbitrary Authorization header to the node's
// request authenticator (Identity.Authenticator: kube's bearer-token
// parsing, static tokens, bound and legacy ServiceAccount JWTs over the
// replicated keys). Nothing may panic, and only the credentials the world
// holds may authenticate, as the users they name.
func FuzzBearerToken(f *testing.F) {
	tokenFile := filepath.Join(f.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte("static-token-1,alice,uid-alice,\"team-a,team-b\"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	w := newWorld(f, func(c *authn.Config) { c.TokenFile = tokenFile })
	sa := w.serviceAccount("default", "app")
	valid := mint(f, w.id.Tokens, sa, nil, nil, []string{authn.DefaultIssuer}, nil)
	parts := strings.Split(valid, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		f.Fatal(err)
	}
	for _, h := range []string{
		"Bearer " + valid,
		"Bearer static-token-1",
		"Bearer " + b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + ".",
		"Bearer " + b64([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2],
		"Bearer " + b64([]byte(`{"alg":"ES256","kid":"../../etc/passwd","crit":["exp"]}`)) + "." + parts[1] + "." + parts[2],
		"Bearer " + parts[0] + "." + b64([]byte(strings.Replace(string(payload), `"sub":`, `"sub":"system:serviceaccount:kube-system:x","sub":`, 1))) + "." + parts[2],
		"Bearer " + parts[0] + "." + b64([]byte(`{"iss":"`+authn.DefaultIssuer+`","exp":1e999,"aud":[[[[]]]]}`)) + "." + parts[2],
		"Bearer " + parts[0] + "." + parts[1],
		"Bearer " + valid + "." + parts[2],
		"Bearer " + parts[0] + "." + parts[1] + "." + parts[2] + "==",
		"Bearer " + strings.Repeat("A", 8192) + "." + strings.Repeat("B", 8192) + ".C",
		"Bearer a.b.c.d.e",
		"Bearer " + valid[:len(valid)/2],
		"Bearer \xff\xfe.\xc3\x28.x",
		"Bearer ",
		"Bearer  " + valid,
		"bearer " + valid,
		"Basic YWxpY2U6cGFzcw==",
		"",
	} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", header)
		resp, ok, err := w.id.Authenticator.AuthenticateRequest(req)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("authenticated with an error: %v", err)
		}
		switch name := resp.User.GetName(); name {
		case "alice", "system:serviceaccount:default:app":
		default:
			t.Fatalf("header %q authenticated as %q", header, name)
		}
	})
}
