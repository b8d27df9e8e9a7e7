package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/certs"
)

// httpResult is a raw HTTP answer.
type httpResult struct {
	code   int
	header http.Header
	body   []byte
}

// do sends one raw request; header may be nil. A transport error fails the test.
func do(t testing.TB, c *http.Client, method, url string, header map[string]string, body []byte) httpResult {
	t.Helper()
	r, err := tryDo(c, method, url, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryDo is do returning its error, for requests sent from goroutines other
// than the test's.
func tryDo(c *http.Client, method, url string, header map[string]string, body []byte) (httpResult, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	if err != nil {
		return httpResult{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return httpResult{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, fmt.Errorf("%s %s: reading body: %w", method, url, err)
	}
	return httpResult{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

// concurrently sends every request at once and returns the answers in
// their order: each request a node that cannot catch up refuses takes its
// whole catch-up budget, so one after the other would add them up.
func concurrently(t testing.TB, reqs ...func() (httpResult, error)) []httpResult {
	t.Helper()
	out := make([]httpResult, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = r()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// jsonHeader is the usual header set of a JSON write.
func jsonHeader(contentType string) map[string]string {
	return map[string]string{"Content-Type": contentType, "Accept": "application/json"}
}

// failureStatus decodes body as a kube failure Status and checks its shape:
// kind Status, apiVersion v1, status Failure, code as the HTTP code and a
// message. (The reason is checked by wantStatus: kube leaves it empty on a
// few 500s.)
func failureStatus(t testing.TB, r httpResult) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("body of a %d is not JSON: %v\n%s", r.code, err, r.body)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure {
		t.Fatalf("body of a %d is not a failure Status: %s", r.code, r.body)
	}
	if int(st.Code) != r.code {
		t.Fatalf("Status code %d, HTTP code %d: %s", st.Code, r.code, r.body)
	}
	if st.Message == "" {
		t.Fatalf("Status without a message: %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Status Content-Type %q", ct)
	}
	return st
}

// wantStatus checks a failure answer's code, reason and message (message
// "" means any; a message ending in "*" is a prefix).
func wantStatus(t testing.TB, r httpResult, code int, reason metav1.StatusReason, message string) metav1.Status {
	t.Helper()
	if r.code != code {
		t.Fatalf("code %d, want %d: %s", r.code, code, r.body)
	}
	st := failureStatus(t, r)
	if st.Reason != reason {
		t.Fatalf("reason %q, want %q: %s", st.Reason, reason, r.body)
	}
	checkMessage(t, st.Message, message)
	return st
}

func checkMessage(t testing.TB, got, want string) {
	t.Helper()
	switch {
	case want == "":
	case strings.HasSuffix(want, "*"):
		if !strings.HasPrefix(got, strings.TrimSuffix(want, "*")) {
			t.Fatalf("message %q, want prefix %q", got, strings.TrimSuffix(want, "*"))
		}
	case got != want:
		t.Fatalf("message %q, want %q", got, want)
	}
}

// wantAPIError checks a client-go error's Status.
func wantAPIError(t testing.TB, err error, code int32, reason metav1.StatusReason, message string) metav1.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d %s", code, reason)
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a Status error", err)
	}
	st := se.Status()
	if st.Code != code || st.Reason != reason {
		t.Fatalf("got %d %s (%q), want %d %s", st.Code, st.Reason, st.Message, code, reason)
	}
	checkMessage(t, st.Message, message)
	return st
}

// dynamicClient is an admin dynamic client (JSON).
func (n *node) dynamicClient() dynamic.Interface {
	n.t.Helper()
	dc, err := dynamic.NewForConfig(n.restConfig())
	if err != nil {
		n.t.Fatal(err)
	}
	return dc
}

// readyz fails the test unless /readyz answers 200.
func (n *node) mustBeReady(t testing.TB) {
	t.Helper()
	r := do(t, n.anonClient(), http.MethodGet, n.url()+"/readyz", nil, nil)
	if r.code != http.StatusOK {
		t.Fatalf("/readyz answered %d: %s\n%s", r.code, r.body, n.logTail())
	}
}

// snapshot maps "namespace/name" to resourceVersion for every object of
// resources (core v1 paths such as "configmaps"), read with raw HTTP.
func (n *node) snapshot(t testing.TB, resources ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	c := n.httpClient()
	for _, res := range resources {
		r := do(t, c, http.MethodGet, n.url()+"/api/v1/"+res, map[string]string{"Accept": "application/json"}, nil)
		if r.code != http.StatusOK {
			t.Fatalf("list %s: %d %s", res, r.code, r.body)
		}
		var list struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			out[res+":"+it.Metadata.Namespace+"/"+it.Metadata.Name] = it.Metadata.ResourceVersion
		}
	}
	return out
}

// sameSnapshot fails unless two snapshots are equal, naming the differences.
func sameSnapshot(t testing.TB, before, after map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range before {
		if after[k] != v {
			diffs = append(diffs, k+": "+v+" -> "+after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			diffs = append(diffs, k+": new at "+v)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("state changed:\n%s", strings.Join(diffs, "\n"))
	}
}

// userConfig is a client configuration for user name in groups, with a
// client certificate issued by the node's CA: the way tests act as someone
// other than the admin.
func (n *node) userConfig(t testing.TB, name string, groups ...string) *rest.Config {
	t.Helper()
	certPEM, keyPEM, err := n.clusterCA(t).Issue(certs.Request{CommonName: name, Organization: groups, Client: true, Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg := n.restConfig()
	cfg.CertFile, cfg.KeyFile = "", ""
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg
}

// userClientset is a clientset acting as name in groups (see userConfig).
func (n *node) userClientset(t testing.TB, name string, groups ...string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(n.userConfig(t, name, groups...))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tokenConfig is a client configuration that authenticates with a bearer
// token only (no client certificate).
func (n *node) tokenConfig(t testing.TB, token string) *rest.Config {
	t.Helper()
	cfg := n.restConfig()
	cfg.CertFile, cfg.KeyFile, cfg.CertData, cfg.KeyData = "", "", nil, nil
	cfg.BearerToken = token
	return cfg
}

// waitFor polls cond every 100 ms until it holds, failing the test with
// what after timeout. The timeout only bounds the wait; nothing is asserted
// about how long it took.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caDirPath is where n's cluster CA lives: the shared --ca-dir, or the
// node's own pki directory.
func (n *node) caDirPath() string {
	if n.external != "" && n.caDir == "" {
		n.t.Skipf("needs the server's client CA to act as other users; set %s", externalCAEnv)
	}
	if n.caDir != "" {
		return n.caDir
	}
	return filepath.Join(n.dir, "pki")
}

// clusterCA loads n's cluster CA, to issue test credentials with it.
func (n *node) clusterCA(t testing.TB) *certs.CA {
	t.Helper()
	ca, err := certs.LoadCA(n.caDirPath())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// whoami is the admin client's identity as the server sees it
// (SelfSubjectReview): the user name and groups differ between servers.
func (n *node) whoami(t testing.TB) authenticationv1.UserInfo {
	t.Helper()
	ssr, err := n.clientset().AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return ssr.Status.UserInfo
}

// manifests returns a function that writes a manifest named name with
// text into a temporary directory of t and returns its path, for kubectl -f.
func manifests(t testing.TB) func(name, text string) string {
	dir := t.TempDir()
	return func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
