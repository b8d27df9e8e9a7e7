package auditlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// everything is the e2e tests' policy: every request at RequestResponse.
const everything = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
`

func resource(group, resource, sub, verb string) authorizer.Attributes {
	return authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: "alice"}, ResourceRequest: true, Verb: verb,
		APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub, Namespace: "ns", Name: "x",
	}
}

func TestCapped(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes([]byte(`apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  resources: [{group: "", resources: [configmaps]}]
- level: Request
  resources: [{group: "", resources: [namespaces]}]
- level: RequestResponse
`))
	if err != nil {
		t.Fatal(err)
	}
	ev := Capped(policy.NewPolicyRuleEvaluator(p))
	cases := []struct {
		name  string
		attrs authorizer.Attributes
		want  auditinternal.Level
	}{
		{"a Secret is capped at Metadata", resource("", "secrets", "", "create"), auditinternal.LevelMetadata},
		{"a list of Secrets is capped at Metadata", resource("", "secrets", "", "list"), auditinternal.LevelMetadata},
		{"a TokenRequest is capped at Metadata", resource("", "serviceaccounts", "token", "create"), auditinternal.LevelMetadata},
		{"a TokenReview is capped at Metadata", resource("authentication.k8s.io", "tokenreviews", "", "create"), auditinternal.LevelMetadata},
		{"another resource at Request keeps it", resource("", "namespaces", "", "create"), auditinternal.LevelRequest},
		{"a ServiceAccount itself keeps the policy's level", resource("", "serviceaccounts", "", "create"), auditinternal.LevelRequestResponse},
		{"another resource keeps the policy's level", resource("certificates.k8s.io", "certificatesigningrequests", "", "create"), auditinternal.LevelRequestResponse},
		{"a secrets resource of another group is not a Secret", resource("example.com", "secrets", "", "get"), auditinternal.LevelRequestResponse},
		{"None stays None", resource("", "configmaps", "", "get"), auditinternal.LevelNone},
		{"a non-resource request keeps the policy's level", authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Path: "/version"}, auditinternal.LevelRequestResponse},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ev.EvaluatePolicyRule(c.attrs).Level; got != c.want {
				t.Fatalf("level %q, want %q", got, c.want)
			}
		})
	}
	// A policy that puts Secrets at Request is capped as well.
	if got := Capped(policy.NewFakePolicyRuleEvaluator(auditinternal.LevelRequest, nil)).EvaluatePolicyRule(resource("", "secrets", "", "update")).Level; got != auditinternal.LevelMetadata {
		t.Fatalf("a Secret at Request: level %q, want Metadata", got)
	}
	if Capped(nil) != nil {
		t.Fatal("Capped(nil) is not nil")
	}
	if Capped(ev) != ev {
		t.Fatal("Capped wraps a capped evaluator again")
	}
}

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		cfg     Config
		err     error
		records bool
	}{
		{"no path records nothing", Config{PolicyFile: writePolicy(t, everything)}, nil, false},
		{"no policy records nothing, as in kube", Config{Path: filepath.Join(dir, "a.log")}, nil, false},
		{"a path and a policy record", Config{Path: filepath.Join(dir, "b", "audit.log"), PolicyFile: writePolicy(t, everything)}, nil, true},
		{"a negative maxsize is refused", Config{Path: filepath.Join(dir, "c.log"), MaxSize: -1}, ErrConfig, false},
		{"a negative maxbackup is refused", Config{Path: filepath.Join(dir, "c.log"), MaxBackups: -1}, ErrConfig, false},
		{"a negative maxage is refused", Config{Path: filepath.Join(dir, "c.log"), MaxAge: -1}, ErrConfig, false},
		{"a missing policy file is refused", Config{Path: filepath.Join(dir, "d.log"), PolicyFile: filepath.Join(dir, "none.yaml")}, ErrPolicy, false},
		{"a policy without rules is refused", Config{Path: filepath.Join(dir, "d.log"), PolicyFile: writePolicy(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\n")}, ErrPolicy, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := Open(c.cfg)
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			defer l.Close()
			if got := l.Sink != nil && l.Policy != nil; got != c.records {
				t.Fatalf("records %v, want %v", got, c.records)
			}
		})
	}
}

// TestLogRotates writes Event JSON lines until the file passes
// --audit-log-maxsize (1 MB, its least value) and checks that they are
// kube's audit.k8s.io/v1 Events and that the file was rotated.
func TestLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(Config{Path: path, PolicyFile: writePolicy(t, everything), MaxSize: 1, MaxBackups: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the log file: %v, %v; want mode 0600", st, err)
	}
	big := strings.Repeat("x", 600<<10)
	for i, id := range []string{"first", "second"} {
		ev := &auditinternal.Event{AuditID: types.UID(id), Level: auditinternal.LevelMetadata, Stage: auditinternal.StageResponseComplete,
			Verb: "get", Annotations: map[string]string{"big": big}}
		if !l.Sink.ProcessEvents(ev) {
			t.Fatalf("event %d not processed", i)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Fatalf("files %v: the log was not rotated", entries)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 2<<20)
	var ids []string
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text()[:80], err)
		}
		if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" {
			t.Fatalf("line is a %s %s, want an audit.k8s.io/v1 Event", ev.APIVersion, ev.Kind)
		}
		ids = append(ids, string(ev.AuditID))
	}
	if strings.Join(ids, ",") != "second" {
		t.Fatalf("the current file holds events %v, want the second only", ids)
	}
}
