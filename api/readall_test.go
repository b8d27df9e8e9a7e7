package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadAll(t *testing.T) {
	big := strings.Repeat("x", maxBodyPresize*2+7)
	cases := []struct {
		name     string
		body     string
		declared int64
		oneByte  bool
	}{
		{"empty, declared", "", 0, false},
		{"declared exactly", `{"spec":{"token":"t"}}`, 22, false},
		{"declared exactly, one byte at a time", `{"spec":{"token":"t"}}`, 22, true},
		{"no declared length", `{"a":1}`, -1, false},
		{"longer than declared", "0123456789", 3, true},
		{"shorter than declared", "012", 1000, false},
		{"past the presize", big, int64(len(big)), false},
		{"declared huge, sent little", "abc", 1 << 40, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tc.body)
			if tc.oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := readAll(r, tc.declared)
			if err != nil || string(got) != tc.body {
				t.Fatalf("got %d bytes, %v; want %d", len(got), err, len(tc.body))
			}
			if cap(got) > maxBodyPresize*4 && len(tc.body) < maxBodyPresize {
				t.Fatalf("a small body kept a buffer of %d bytes", cap(got))
			}
		})
	}
	t.Run("a read error is returned", func(t *testing.T) {
		boom := errors.New("boom")
		got, err := readAll(io.MultiReader(bytes.NewReader([]byte("ab")), iotest.ErrReader(boom)), 10)
		if !errors.Is(err, boom) || string(got) != "ab" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
}

// TestDecodeErrorsQuoteNoSecret: kube quotes the first 30 bytes of a body
// it finds no kind in; trustplane does too, except for the bodies that may
// hold a secret or a token, whose error messages the audit log records.
func TestDecodeErrorsQuoteNoSecret(t *testing.T) {
	e := newFuzzEnv(t)
	defer e.reset(t)
	cases := []struct {
		name, path string
		quoted     bool
	}{
		{"a ConfigMap's body is quoted, as kube quotes it", "/api/v1/namespaces/fuzz/configmaps", true},
		{"a Secret's is not", "/api/v1/namespaces/fuzz/secrets", false},
		{"a TokenReview's is not", "/apis/authentication.k8s.io/v1/tokenreviews", false},
		{"a TokenRequest's is not", "/api/v1/namespaces/fuzz/serviceaccounts/default/token", false},
	}
	body := []byte(`{"stringData":{"k":"s3cr3t"`)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPost, tc.path, "application/json", body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "the object provided is unrecognized") {
				t.Fatalf("got %d %s", rec.Code, rec.Body)
			}
			if got := strings.Contains(rec.Body.String(), "s3cr3t"); got != tc.quoted {
				t.Fatalf("quoted %v, want %v: %s", got, tc.quoted, rec.Body)
			}
		})
	}
}
