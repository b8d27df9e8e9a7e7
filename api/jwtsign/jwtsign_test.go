package jwtsign

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// recordingSigner signs nothing: it records what it was asked, so that
// the tests see whether a refused request reached the key.
type recordingSigner struct{ calls []string }

func (r *recordingSigner) SignClaims(_ context.Context, claims string) (string, string, string, error) {
	r.calls = append(r.calls, claims)
	return "h", "s", "kid-1", nil
}

// allow is an authorizer granting "sign" on the issuers and audiences
// listed, as an RBAC role with resourceNames would.
func allow(issuers, audiences []string) authorizer.Authorizer {
	ok := map[string]bool{}
	for _, i := range issuers {
		ok["issuers/"+i] = true
	}
	for _, a := range audiences {
		ok["audiences/"+a] = true
	}
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "sign" && a.GetAPIGroup() == Group && ok[a.GetResource()+"/"+a.GetName()] {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func segment(claims string) string { return base64.RawURLEncoding.EncodeToString([]byte(claims)) }

func TestSign(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	good := fmt.Sprintf(`{"iss":"https://ref.example","aud":["vault","https://ref.example"],"sub":"system:serviceaccount:a:b","iat":%d,"exp":%d}`, now.Unix(), now.Add(time.Hour).Unix())
	claimsWith := func(f func(map[string]any)) string {
		m := map[string]any{}
		json.Unmarshal([]byte(good), &m)
		f(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct {
		name string
		body string
		user user.Info
		code int
		msg  string
	}{
		{name: "allowed", body: `{"claims":"` + segment(good) + `"}`, code: 200},
		{name: "own issuer", body: `{"claims":"` + segment(strings.Replace(good, "https://ref.example\",\"aud", "https://tp.example\",\"aud", 1)) + `"}`, code: 403, msg: "it is this cluster's own issuer"},
		{name: "legacy issuer", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iss"] = "kubernetes/serviceaccount" })) + `"}`, code: 403, msg: "own issuer"},
		{name: "own issuer, another spelling", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iss"] = " HTTPS://TP.example// " })) + `"}`, code: 403, msg: "own issuer"},
		{name: "issuer not allowed", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iss"] = "https://other.example" })) + `"}`, code: 403, msg: `user "sidecar" may not sign for this issuer`},
		{name: "one audience not allowed", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["aud"] = []string{"vault", "aws"} })) + `"}`, code: 403, msg: `audiences.externaljwt.trustplane.io "aws" is forbidden`},
		{name: "one audience as a string", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["aud"] = "vault" })) + `"}`, code: 200},
		{name: "no audience", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { delete(m, "aud") })) + `"}`, code: 400, msg: "claims need audiences"},
		{name: "empty audiences", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["aud"] = []string{} })) + `"}`, code: 400, msg: "claims need audiences"},
		{name: "numeric audience", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["aud"] = 7 })) + `"}`, code: 400, msg: "claims need audiences"},
		{name: "no exp", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { delete(m, "exp") })) + `"}`, code: 400, msg: "tokens signed here expire"},
		{name: "expired", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["exp"] = now.Unix() - 1 })) + `"}`, code: 400, msg: "has expired"},
		{name: "too long", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["exp"] = now.Add(49 * time.Hour).Unix() })) + `"}`, code: 400, msg: "the limit is 48h0m0s"},
		{name: "overflowing exp", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["exp"] = int64(1) << 62 })) + `"}`, code: 400, msg: "the limit is"},
		{name: "fractional exp", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["exp"] = 1.5e9 + 0.5 })) + `"}`, code: 400, msg: "whole seconds"},
		{name: "no issuer", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { delete(m, "iss") })) + `"}`, code: 400, msg: "claims need an issuer"},
		{name: "claims not an object", body: `{"claims":"` + segment(`[1]`) + `"}`, code: 400, msg: "not a JSON object"},
		{name: "two objects", body: `{"claims":"` + segment(good+good) + `"}`, code: 400, msg: "not a single JSON object"},
		{name: "padded segment", body: `{"claims":"` + segment(good) + `="}`, code: 400, msg: "URL-safe base64 without padding"},
		{name: "a newline in the segment", body: `{"claims":"` + segment(good) + `\n"}`, code: 400, msg: "URL-safe base64 without padding"},
		{name: "unknown field", body: `{"claims":"` + segment(good) + `","header":"x"}`, code: 400, msg: "unknown field"},
		{name: "huge claims", body: `{"claims":"` + strings.Repeat("A", MaxClaimsBytes+4) + `"}`, code: 413, msg: "the limit is 16384"},
		{name: "two issuers", body: `{"claims":"` + segment(`{"iss":"https://tp.example",`+good[1:]) + `"}`, code: 400, msg: `claims have the key "iss" twice`},
		{name: "two audiences keys", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"aud":"aws","sub"`, 1)) + `"}`, code: 400, msg: `claims have the key "aud" twice`},
		{name: "a nested key twice", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"kubernetes.io":{"namespace":"a","pod":{"name":"p"},"namespace":"b"},"sub"`, 1)) + `"}`, code: 400, msg: `claims have the key "namespace" twice`},
		{name: "the same key in sibling objects", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"x":[{"a":1},{"a":2}],"y":{"a":{"a":1}},"sub"`, 1)) + `"}`, code: 200},
		{name: "deep nesting", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`,"sub"`, 1)) + `"}`, code: 400, msg: "nest deeper than 32"},
		{name: "a key in another case", body: `{"claims":"` + segment(`{"iss":"https://tp.example","ISS":"https://ref.example",`+good[len(`{"iss":"https://ref.example",`):]) + `"}`, code: 400, msg: `claims have the keys "iss" and "ISS"`},
		{name: "a key with a long s", body: `{"claims":"` + segment(`{"iss":"https://tp.example","iſs":"https://ref.example",`+good[len(`{"iss":"https://ref.example",`):]) + `"}`, code: 400, msg: `which JWT libraries may take for one`},
		{name: "Aud beside aud", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"Aud":"aws","sub"`, 1)) + `"}`, code: 400, msg: `claims have the keys "aud" and "Aud"`},
		{name: "EXP beside exp", body: `{"claims":"` + segment(strings.Replace(good, `"sub"`, `"EXP":9999999999,"sub"`, 1)) + `"}`, code: 400, msg: `"EXP"`},
		{name: "only an upper-case issuer", body: `{"claims":"` + segment(strings.Replace(good, `"iss"`, `"ISS"`, 1)) + `"}`, code: 400, msg: "claims need an issuer"},
		{name: "overflowing lifetime", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iat"] = int64(-1)<<62 - 1; m["exp"] = int64(1) << 62 })) + `"}`, code: 400, msg: "iat is in the past"},
		{name: "iat long ago", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iat"] = now.Add(-time.Hour).Unix() })) + `"}`, code: 400, msg: "iat is in the past"},
		{name: "iat in the future", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iat"] = now.Add(time.Hour).Unix(); m["exp"] = now.Add(2 * time.Hour).Unix() })) + `"}`, code: 400, msg: "iat is in the future"},
		{name: "iat within the skew", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["iat"] = now.Add(-2 * time.Minute).Unix() })) + `"}`, code: 200},
		{name: "nbf after exp", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["nbf"] = now.Add(3 * time.Hour).Unix() })) + `"}`, code: 400, msg: "nbf must be"},
		{name: "exp quoted", body: `{"claims":"` + segment(claimsWith(func(m map[string]any) { m["exp"] = fmt.Sprint(now.Add(time.Hour).Unix()) })) + `"}`, code: 400, msg: "whole seconds"},
		{name: "exp with an exponent", body: `{"claims":"` + segment(strings.Replace(good, fmt.Sprintf(`"exp":%d`, now.Add(time.Hour).Unix()), `"exp":1.9e9`, 1)) + `"}`, code: 400, msg: "whole seconds"},
		{name: "no user", body: `{"claims":"` + segment(good) + `"}`, user: &user.DefaultInfo{}, code: 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sig := &recordingSigner{}
			h := Handler(Config{
				Signer: sig, Authorizer: allow([]string{"https://ref.example", "https://tp.example"}, []string{"vault", "https://ref.example"}),
				OwnIssuers: []string{"https://tp.example"}, MaxLifetime: 48 * time.Hour, Now: func() time.Time { return now },
			})
			req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(c.body))
			u := c.user
			if u == nil {
				u = &user.DefaultInfo{Name: "sidecar", Groups: []string{user.AllAuthenticated}}
			}
			if u.GetName() != "" {
				req = req.WithContext(genericapirequest.WithUser(req.Context(), u))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.code || !strings.Contains(strings.ReplaceAll(rec.Body.String(), `\"`, `"`), c.msg) {
				t.Fatalf("%d %s; want %d with %q", rec.Code, rec.Body, c.code, c.msg)
			}
			if signed := len(sig.calls) > 0; signed != (c.code == 200) {
				t.Fatalf("signer called: %v, for answer %d", signed, rec.Code)
			}
			if c.code == 200 {
				var r Response
				if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || r.Header != "h" || r.Signature != "s" || r.KeyID != "kid-1" {
					t.Fatalf("answer %s", rec.Body)
				}
			}
		})
	}
}
