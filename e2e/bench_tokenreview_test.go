package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
)

// BenchmarkTokenReview measures TokenReviews per second on one node, 32
// concurrent raw HTTPS clients (admin certificate), in two modes: one
// token reviewed over and over, and 1,000 distinct tokens in rotation. Each
// answer is read and checked for authenticated=true, so a failing review
// fails the benchmark.
func BenchmarkTokenReview(b *testing.B) {
	n := startNode(b)
	cs := n.clientset()
	makeSA(b, cs, "default", "bench")
	const distinct = 1000
	bodies := make([][]byte, distinct)
	for i := range bodies {
		tok := requestToken(b, cs, "default", "bench", authenticationv1.TokenRequestSpec{}).Status.Token
		body, err := json.Marshal(authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}})
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = body
	}
	raw := make([]*http.Client, benchClients)
	for i := range raw {
		tlsCfg, err := rest.TLSConfigFor(n.restConfig())
		if err != nil {
			b.Fatal(err)
		}
		raw[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}
	}
	url := n.url() + "/apis/authentication.k8s.io/v1/tokenreviews"
	post := func(c *http.Client, body []byte) error {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("TokenReview: %s: %s", resp.Status, out)
		}
		if !bytes.Contains(out, []byte(`"authenticated":true`)) {
			return fmt.Errorf("TokenReview not authenticated: %s", out)
		}
		return nil
	}
	for _, mode := range []struct {
		name   string
		tokens int
	}{{"repeated", 1}, {"distinct-1000", distinct}} {
		b.Run(mode.name, func(b *testing.B) {
			profileDuring(b, n, func() {
				runParallel(b, len(raw), func(c int, i int64) error {
					return post(raw[c], bodies[i%int64(mode.tokens)])
				})
			})
		})
	}
}
