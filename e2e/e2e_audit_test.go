package e2e_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/api/controllers"
)

// auditEverything is an audit.k8s.io/v1 Policy recording every request
// with its request and response bodies.
const auditEverything = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
`

// writeAuditPolicy writes auditEverything to a file of its own.
func writeAuditPolicy(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit-policy.yaml")
	if err := os.WriteFile(path, []byte(auditEverything), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditEvents parses the audit.k8s.io/v1 Event JSON lines in text; other
// lines (a node's own log, when the audit log is standard out) are
// skipped.
func auditEvents(t *testing.T, text string) []auditv1.Event {
	t.Helper()
	var out []auditv1.Event
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Kind != "Event" {
			continue
		}
		if ev.APIVersion != "audit.k8s.io/v1" {
			t.Fatalf("an event in %s, want audit.k8s.io/v1", ev.APIVersion)
		}
		out = append(out, ev)
	}
	return out
}

// auditMatch picks events: of user (impersonating impersonated, "" for
// no one), verb, stage and, when resource is set, that object.
type auditMatch struct {
	user, verb, resource, subresource, name string
	stage                                   auditv1.Stage
	impersonated                            string
}

func (m auditMatch) find(events []auditv1.Event) []auditv1.Event {
	var out []auditv1.Event
	for _, ev := range events {
		if ev.User.Username != m.user || ev.Verb != m.verb || ev.Stage != m.stage {
			continue
		}
		if imp := ev.ImpersonatedUser; imp == nil && m.impersonated != "" || imp != nil && imp.Username != m.impersonated {
			continue
		}
		if m.resource != "" && (ev.ObjectRef == nil || ev.ObjectRef.Resource != m.resource ||
			ev.ObjectRef.Subresource != m.subresource || ev.ObjectRef.Name != m.name) {
			continue
		}
		out = append(out, ev)
	}
	return out
}

// one waits until events read by read hold one event that m picks, and
// returns it; more than one fails the test.
func (m auditMatch) one(t *testing.T, read func() []auditv1.Event) auditv1.Event {
	t.Helper()
	var found []auditv1.Event
	waitFor(t, 15*time.Second, "the audit event of "+m.verb+" "+m.resource+"/"+m.subresource+" "+m.name+" ("+string(m.stage)+")", func() bool {
		found = m.find(read())
		return len(found) > 0
	})
	if len(found) != 1 {
		t.Fatalf("%d events %+v, want one", len(found), m)
	}
	return found[0]
}

// TestE2EAudit starts a node with --audit-log-path and a policy that asks
// for every request and response body, and checks kube's events: stages,
// levels, users, impersonation, object references, response codes,
// authorisation and deprecation annotations, the failed-authentication
// event, and that no secret data, token or bearer credential reaches the
// file at any level.
func TestE2EAudit(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "audit", "audit.log")
	n := startNode(t, "--audit-log-path", logPath, "--audit-policy-file", writeAuditPolicy(t),
		"--audit-log-maxsize", "1", "--audit-log-maxbackup", "2",
		"--runtime-config", "authentication.k8s.io/v1beta1=true") // the deprecated version used below
	ctx := context.Background()
	admin := n.clientset()
	me := n.whoami(t).Username
	read := func() []auditv1.Event {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		return auditEvents(t, string(b))
	}
	const ns = "audited"
	createNamespace(t, admin, ns)

	// The requests.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"color": "audit-blue"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	const secretData, secretString = "hunter2-data-never-logged", "hunter3-stringdata-never-logged"
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"password": []byte(secretData)},
		StringData: map[string]string{"other": secretString}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "robot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Fatalf("TokenReview: %v %+v", err, review)
	}
	robot, err := kubernetes.NewForConfig(n.tokenConfig(t, token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := robot.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the robot listed secrets; want 403")
	}
	asBob := impersonating(t, n.restConfig(), rest.ImpersonationConfig{UserName: "bob", Groups: []string{"system:masters"}})
	if _, err := asBob.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// A request to a deprecated version, raw, to see its Warning header.
	deprecated := do(t, n.httpClient(), http.MethodPost, n.url()+"/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
		jsonHeader("application/json"), []byte(`{"apiVersion":"authentication.k8s.io/v1beta1","kind":"SelfSubjectReview"}`))
	if deprecated.code != http.StatusCreated {
		t.Fatalf("v1beta1 SelfSubjectReview: %d %s", deprecated.code, deprecated.body)
	}
	// A watch streams through the audit filter's response writer.
	wctx, stopWatch := context.WithTimeout(ctx, 30*time.Second)
	defer stopWatch()
	w, err := admin.CoreV1().ConfigMaps(ns).Watch(wctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if m, ok := ev.Object.(metav1.Object); ok && m.GetName() == "watched" {
			break
		}
	}
	w.Stop()
	if wctx.Err() != nil {
		t.Fatal("the watch did not deliver the ConfigMap created")
	}
	const bogus = "bogus-bearer-token-never-logged"
	unauth := do(t, n.anonClient(), "GET", n.url()+"/api/v1/namespaces/"+ns+"/configmaps", map[string]string{"Authorization": "Bearer " + bogus}, nil)
	if unauth.code != 401 {
		t.Fatalf("a bogus bearer token: %d, want 401", unauth.code)
	}

	t.Run("a create is recorded at both stages, with both bodies", func(t *testing.T) {
		done := auditMatch{me, "create", "configmaps", "", "settings", auditv1.StageResponseComplete, ""}.one(t, read)
		if done.Level != auditv1.LevelRequestResponse || done.ResponseStatus == nil || done.ResponseStatus.Code != 201 {
			t.Fatalf("level %q status %+v, want RequestResponse and 201", done.Level, done.ResponseStatus)
		}
		ref := done.ObjectRef
		if ref.Namespace != ns || ref.APIGroup != "" || ref.APIVersion != "v1" {
			t.Fatalf("objectRef %+v", ref)
		}
		if done.RequestObject == nil || !strings.Contains(string(done.RequestObject.Raw), "audit-blue") ||
			done.ResponseObject == nil || !strings.Contains(string(done.ResponseObject.Raw), "audit-blue") {
			t.Fatalf("request %v response %v: want both ConfigMaps", done.RequestObject, done.ResponseObject)
		}
		received := 0
		for _, ev := range read() {
			if ev.AuditID == done.AuditID && ev.Stage == auditv1.StageRequestReceived {
				received++
			}
		}
		if received != 1 {
			t.Fatalf("%d RequestReceived events of audit ID %s, want 1", received, done.AuditID)
		}
	})
	t.Run("a watch is recorded when its response starts", func(t *testing.T) {
		ev := auditMatch{me, "watch", "configmaps", "", "", auditv1.StageResponseStarted, ""}.one(t, read)
		if ev.ResponseStatus.Code != 200 {
			t.Fatalf("status %+v, want 200", ev.ResponseStatus)
		}
	})
	t.Run("a get records the object read", func(t *testing.T) {
		ev := auditMatch{me, "get", "configmaps", "", "settings", auditv1.StageResponseComplete, ""}.one(t, read)
		if ev.ResponseStatus.Code != 200 || ev.ResponseObject == nil || !strings.Contains(string(ev.ResponseObject.Raw), "audit-blue") {
			t.Fatalf("status %+v response %v", ev.ResponseStatus, ev.ResponseObject)
		}
	})
	for _, c := range []struct {
		name, resource, sub, objName, group string
	}{
		{"a Secret is recorded at Metadata, whatever the policy says", "secrets", "", "creds", ""},
		{"a TokenRequest is recorded at Metadata", "serviceaccounts", "token", "robot", ""},
		{"a TokenReview is recorded at Metadata", "tokenreviews", "", "", "authentication.k8s.io"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := auditMatch{me, "create", c.resource, c.sub, c.objName, auditv1.StageResponseComplete, ""}.one(t, read)
			if ev.Level != auditv1.LevelMetadata || ev.RequestObject != nil || ev.ResponseObject != nil {
				t.Fatalf("level %q request %v response %v: want Metadata and no bodies", ev.Level, ev.RequestObject, ev.ResponseObject)
			}
			if ev.ResponseStatus.Code != 201 || ev.ObjectRef.APIGroup != c.group {
				t.Fatalf("status %+v objectRef %+v", ev.ResponseStatus, ev.ObjectRef)
			}
		})
	}
	t.Run("a 403 records the caller the token names and the decision", func(t *testing.T) {
		ev := auditMatch{"system:serviceaccount:" + ns + ":robot", "list", "secrets", "", "", auditv1.StageResponseComplete, ""}.one(t, read)
		if ev.ResponseStatus.Code != 403 || ev.Annotations["authorization.k8s.io/decision"] != "forbid" {
			t.Fatalf("status %+v annotations %v, want 403 and decision forbid", ev.ResponseStatus, ev.Annotations)
		}
	})
	t.Run("an impersonated request records both users", func(t *testing.T) {
		ev := auditMatch{me, "get", "configmaps", "", "settings", auditv1.StageResponseComplete, "bob"}.one(t, read)
		if groups := strings.Join(ev.ImpersonatedUser.Groups, ","); !strings.Contains(groups, "system:masters") || ev.ResponseStatus.Code != 200 {
			t.Fatalf("impersonated groups %s status %+v, want system:masters and 200", groups, ev.ResponseStatus)
		}
	})
	// Issue 15's deprecation triple: the one request to a deprecated
	// version gets kube's Warning header, the audit annotations and the
	// apiserver_requested_deprecated_apis gauge.
	t.Run("a deprecated version: the Warning header, the audit annotations and the gauge", func(t *testing.T) {
		ws := warnings(t, deprecated)
		if len(ws) != 1 || !strings.Contains(ws[0], "authentication.k8s.io/v1beta1 SelfSubjectReview is deprecated") {
			t.Fatalf("warnings %q, want kube's deprecation warning", ws)
		}
		if v, ok := value(metricFamilies(t, n.httpClient(), n), "apiserver_requested_deprecated_apis", map[string]string{
			"group": "authentication.k8s.io", "version": "v1beta1", "resource": "selfsubjectreviews", "removed_release": "1.33",
		}); !ok || v != 1 {
			t.Fatalf("apiserver_requested_deprecated_apis %v (found %v), want 1", v, ok)
		}
		var ev auditv1.Event
		waitFor(t, 15*time.Second, "the v1beta1 SelfSubjectReview", func() bool {
			for _, e := range (auditMatch{me, "create", "selfsubjectreviews", "", "", auditv1.StageResponseComplete, ""}).find(read()) {
				if e.ObjectRef.APIVersion == "v1beta1" {
					ev = e
					return true
				}
			}
			return false
		})
		if ev.Annotations["k8s.io/deprecated"] != "true" || ev.Annotations["k8s.io/removed-release"] != "1.33" {
			t.Fatalf("annotations %v, want k8s.io/deprecated=true and k8s.io/removed-release=1.33", ev.Annotations)
		}
	})
	t.Run("a failed authentication is recorded without a user, under the Audit-ID it answered", func(t *testing.T) {
		id := unauth.header.Get("Audit-Id")
		if id == "" {
			t.Fatal("no Audit-ID header on the 401")
		}
		ev := auditMatch{"", "list", "configmaps", "", "", auditv1.StageResponseStarted, ""}.one(t, read)
		if string(ev.AuditID) != id || ev.ResponseStatus.Code != 401 {
			t.Fatalf("event %s status %+v; want audit ID %s, 401", ev.AuditID, ev.ResponseStatus, id)
		}
	})
	t.Run("no secret data, token or bearer credential is in the file", func(t *testing.T) {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range map[string]string{
			"the secret's data": secretData, "its data in base64": base64.StdEncoding.EncodeToString([]byte(secretData)),
			"the secret's stringData": secretString, "its stringData in base64": base64.StdEncoding.EncodeToString([]byte(secretString)),
			"the issued token": token, "the token's signature": token[strings.LastIndex(token, ".")+1:],
			"the bogus bearer token": bogus,
		} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s is in the audit log", what)
			}
		}
	})
	// Last, as it moves the events above out of the file.
	t.Run("the file is rotated past --audit-log-maxsize", func(t *testing.T) {
		big := strings.Repeat("x", 100<<10)
		rotated := func() bool {
			entries, err := os.ReadDir(filepath.Dir(logPath))
			if err != nil {
				t.Fatal(err)
			}
			return len(entries) > 1
		}
		if rotated() {
			t.Fatal("the audit log was rotated before its 1 MB")
		}
		// Each create's event holds the ConfigMap twice: 1 MB is about
		// five of them.
		creates := 0
		for ; creates < 40 && !rotated(); creates++ {
			if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "big-"}, Data: map[string]string{"big": big}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if !rotated() {
			t.Fatal("the audit log was not rotated after 40 creates of 100 KiB")
		}
		t.Logf("rotated after %d creates of 100 KiB", creates)
		if st, err := os.Stat(logPath); err != nil || st.Size() > 1<<20 {
			t.Fatalf("the current file: %v, %v; want at most 1 MiB", st, err)
		}
	})
}

// TestE2EAuditCluster checks that a write a follower forwards to the
// leader is recorded once, by the follower its client talks to, with the
// client's identity, and not again by the leader; and that the annotations
// the leader's admission adds (an admission policy's Audit action and
// auditAnnotations) reach the follower's event. It runs the nodes with
// --execute-writes=leader, the forwarding mode; the same record of a write
// a follower runs itself is checked by TestClusterReplicaAndWebhooks.
func TestE2EAuditCluster(t *testing.T) {
	nodes := startCluster(t, 3, "--audit-log-path", "-", "--audit-policy-file", writeAuditPolicy(t), "--execute-writes", "leader")
	leader := leaderOf(t, nodes)
	follower := followersOf(nodes, leader)[0]
	const writer = "audit-forwarder"
	cs := follower.userClientset(t, writer, "system:masters")
	if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "forwarded"}, Data: map[string]string{"k": "forwarded-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if leaderOf(t, nodes) == follower {
		t.Skip("leadership moved to the follower during the write; nothing was forwarded")
	}
	// The follower decodes what it forwards (protobuf, from client-go)
	// and the leader's answer for its event. The leader would have
	// written a RequestReceived event before it answered the follower, so
	// before the follower's last one.
	auditedOnceBy(t, nodes, follower, writer, "forwarded", "forwarded-value")

	// An audited policy on ConfigMaps in default, in force once a create
	// through the follower is warned.
	ctx := context.Background()
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-audit-cm"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "false", Message: "always audited"}},
			AuditAnnotations: []admissionregistrationv1.AuditAnnotation{{Key: "cm", ValueExpression: "string(object.metadata.name)"}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx,
		bind("e2e-audit-cm-b", "e2e-audit-cm", "default", admissionregistrationv1.Warn, admissionregistrationv1.Audit), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := createUntilWarned(t, follower, "/api/v1/namespaces/default/configmaps", "ConfigMap", func(r httpResult) {
		if r.header.Get("X-Trustplane-Audit-Annotations") != "" {
			t.Fatal("the follower passed the leader's annotations header on to its client")
		}
	})
	if leaderOf(t, nodes) == follower {
		t.Skip("leadership moved to the follower; the audited write may not have been forwarded")
	}
	waitFor(t, 15*time.Second, "the follower's event of the audited create", func() bool {
		for _, ev := range auditEvents(t, follower.fullLog()) {
			if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Name != name || ev.Stage != auditv1.StageResponseComplete {
				continue
			}
			if got := ev.Annotations["e2e-audit-cm/cm"]; got != name {
				t.Fatalf("annotation e2e-audit-cm/cm = %q, want %q (%v)", got, name, ev.Annotations)
			}
			if failure := ev.Annotations["validation.policy.admission.k8s.io/validation_failure"]; !strings.Contains(failure, `"message":"always audited"`) {
				t.Fatalf("validation_failure annotation %q", failure)
			}
			return true
		}
		return false
	})

	// The controllers' host, a follower, writes their lease through the
	// leader, which reserves it for the nodes' components and knows this
	// one for a component by the forwarding node's word: the host took
	// the lease and keeps renewing it.
	host := hostOf(t, nodes)
	since := time.Now()
	waitFor(t, 30*time.Second, "the controllers' lease renewed by "+host.name, func() bool {
		l, err := cs.CoordinationV1().Leases(controllers.LeaseNamespace).Get(ctx, controllers.LeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since) &&
			l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == host.name
	})
	if started, stopped := terms(host); started != stopped+1 {
		t.Fatalf("%s's controllers: %d terms started, %d stopped", host.name, started, stopped)
	}
}

// auditedOnceBy checks that writer's create of the ConfigMap name in
// default, holding value, is recorded by node alone: one ResponseComplete
// event with the 201, the object sent and the one created, and no event of
// writer's on any other node.
func auditedOnceBy(t *testing.T, nodes []*node, node *node, writer, name, value string) {
	t.Helper()
	match := auditMatch{writer, "create", "configmaps", "", name, auditv1.StageResponseComplete, ""}
	ev := match.one(t, func() []auditv1.Event { return auditEvents(t, node.fullLog()) })
	if ev.ResponseStatus == nil || ev.ResponseStatus.Code != 201 || ev.ObjectRef.Namespace != "default" {
		t.Fatalf("%s's event: status %+v objectRef %+v, want 201 in default", node.name, ev.ResponseStatus, ev.ObjectRef)
	}
	if ev.RequestObject == nil || !strings.Contains(string(ev.RequestObject.Raw), value) ||
		ev.ResponseObject == nil || !strings.Contains(string(ev.ResponseObject.Raw), `"uid"`) {
		t.Fatalf("%s's event: request %v response %v, want the ConfigMap sent and the one created", node.name, ev.RequestObject, ev.ResponseObject)
	}
	for _, n := range nodes {
		if n == node {
			continue
		}
		for _, e := range auditEvents(t, n.fullLog()) {
			if e.User.Username == writer {
				t.Errorf("%s recorded %s %s by %q too", n.name, e.Stage, e.Verb, e.User.Username)
			}
		}
	}
}
