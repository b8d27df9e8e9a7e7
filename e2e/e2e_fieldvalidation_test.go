package e2e_test

import (
	"context"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// warnings returns the texts of a response's Warning headers, which must
// all be kube's code 299.
func warnings(t *testing.T, r httpResult) []string {
	t.Helper()
	ws, errs := utilnet.ParseWarningHeaders(r.header.Values("Warning"))
	if len(errs) > 0 {
		t.Fatalf("bad Warning headers %q: %v", r.header.Values("Warning"), errs)
	}
	var out []string
	for _, w := range ws {
		if w.Code != 299 {
			t.Fatalf("warning code %d: %q", w.Code, w.Text)
		}
		out = append(out, w.Text)
	}
	return out
}

// TestFieldValidation is the fieldValidation matrix: Ignore, Warn (the
// default) and Strict on POST, PUT and every PATCH type, with unknown and
// duplicate fields in JSON and YAML bodies. Warn answers with one Warning
// per problem, Strict refuses the request listing them all, Ignore says
// nothing; the wording is kube-apiserver's.
func TestFieldValidation(t *testing.T) {
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	if _, err := n.clientset().CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := n.httpClient()
	pods := n.url() + "/api/v1/namespaces/default/pods"
	cms := n.url() + "/api/v1/namespaces/default/configmaps"
	tokens := n.url() + "/api/v1/namespaces/default/serviceaccounts/default/token"
	reviews := n.url() + "/apis/authentication.k8s.io/v1/tokenreviews"
	selfReviews := n.url() + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	roles := n.url() + "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles"

	podJSON := func(name string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","name":"` + name + `"},` +
			`"spec":{"foo":1,"containers":[{"name":"c","image":"nginx","bar":2}]}}`)
	}
	podYAML := func(name string) []byte {
		return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  foo: 1\n  containers:\n  - name: c\n    image: nginx\n    bar: 2\n")
	}
	podProblems := []string{`duplicate field "metadata.name"`, `unknown field "spec.foo"`, `unknown field "spec.containers[0].bar"`}
	yamlProblems := []string{`unknown field "spec.foo"`, `unknown field "spec.containers[0].bar"`}

	type tc struct {
		name             string
		method, url, ct  string
		body             []byte
		code             int
		warnings         []string
		reason           metav1.StatusReason
		message          string // for failures
		orderInsensitive bool
		// differs says how trustplane's answer deliberately differs from
		// kube-apiserver's (docs/COMPATIBILITY.md): only trustplane is
		// held to it.
		differs string
	}
	cases := []tc{
		{name: "POST JSON, default Warn", method: http.MethodPost, url: pods, ct: "application/json", body: podJSON("p1"),
			code: http.StatusCreated, warnings: podProblems},
		{name: "POST JSON, Ignore", method: http.MethodPost, url: pods + "?fieldValidation=Ignore", ct: "application/json", body: podJSON("p2"),
			code: http.StatusCreated},
		{name: "POST JSON, Strict", method: http.MethodPost, url: pods + "?fieldValidation=Strict", ct: "application/json", body: podJSON("p3"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `Pod in version "v1" cannot be handled as a Pod: strict decoding error: duplicate field "metadata.name", unknown field "spec.foo", unknown field "spec.containers[0].bar"`},
		{name: "POST YAML, Warn", method: http.MethodPost, url: pods + "?fieldValidation=Warn", ct: "application/yaml", body: podYAML("p4"),
			code: http.StatusCreated, warnings: yamlProblems, orderInsensitive: true},
		{name: "POST YAML with a duplicate, Strict", method: http.MethodPost, url: pods + "?fieldValidation=Strict", ct: "application/yaml",
			body: []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p5\n  name: p5\nspec:\n  containers:\n  - name: c\n    image: nginx\n"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: yaml: unmarshal errors:\n  line 5: key \"name\" already set in map"},
		{name: "PUT JSON, Warn", method: http.MethodPut, url: cms + "/cm", ct: "application/json",
			body: []byte(`{"metadata":{"name":"cm","foo":1},"data":{"a":"1"},"data":{"a":"2"}}`),
			code: http.StatusOK, warnings: []string{`duplicate field "data"`, `unknown field "metadata.foo"`}, orderInsensitive: true},
		{name: "PUT JSON, Strict", method: http.MethodPut, url: cms + "/cm?fieldValidation=Strict", ct: "application/json",
			body: []byte(`{"metadata":{"name":"cm","foo":1},"bar":1}`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "metadata.foo", unknown field "bar"`},
		{name: "merge patch, Warn", method: http.MethodPatch, url: cms + "/cm", ct: "application/merge-patch+json",
			body: []byte(`{"data":{"b":"1"},"bar":1}`), code: http.StatusOK, warnings: []string{`unknown field "bar"`}},
		{name: "merge patch, Strict", differs: "Strict is 400 on patches (kube: 422)", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Strict", ct: "application/merge-patch+json",
			body: []byte(`{"data":{"b":"1"},"bar":1,"bar":2}`), code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "bar", unknown field "bar"`},
		{name: "merge patch, Ignore", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Ignore", ct: "application/merge-patch+json",
			body: []byte(`{"data":{"b":"2"},"bar":1,"bar":2}`), code: http.StatusOK},
		{name: "JSON patch, Warn", method: http.MethodPatch, url: cms + "/cm", ct: "application/json-patch+json",
			body: []byte(`[{"op":"add","path":"/data/c","value":"1","foo":1}]`), code: http.StatusOK, warnings: []string{`json patch unknown field "[0].foo"`}},
		{name: "JSON patch, Strict", differs: "Strict is 400 on patches (kube: 422)", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Strict", ct: "application/json-patch+json",
			body: []byte(`[{"op":"add","path":"/data/c","value":"1","foo":1},{"op":"add","path":"/bar","value":1}]`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: json patch unknown field "[0].foo", unknown field "bar"`},
		{name: "strategic merge patch, Warn", method: http.MethodPatch, url: cms + "/cm", ct: "application/strategic-merge-patch+json",
			body: []byte(`{"data":{"d":"1"},"bar":1,"bar":2}`), code: http.StatusOK, warnings: []string{`duplicate field "bar"`, `unknown field "bar"`}},
		{name: "strategic merge patch, Strict", differs: "Strict is 400 on patches (kube: 422)", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Strict", ct: "application/strategic-merge-patch+json",
			body: []byte(`{"data":{"d":"1"},"bar":1,"bar":2}`), code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "bar", unknown field "bar"`},
		// A patched object that does not decode is the specification's
		// 400 at every level (kube: 422), naming only that error.
		{name: "merge patch with a value of the wrong type, Ignore", differs: "a patched object that does not decode is 400 (kube: 422)", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Ignore", ct: "application/merge-patch+json",
			body: []byte(`{"data":5,"bar":1}`), code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type map[string]string`},
		{name: "JSON patch with a value of the wrong type, Strict", differs: "a patched object that does not decode is 400 (kube: 422)", method: http.MethodPatch, url: cms + "/cm?fieldValidation=Strict", ct: "application/json-patch+json",
			body: []byte(`[{"op":"add","path":"/bar","value":1},{"op":"add","path":"/immutable","value":"yes"}]`), code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal string into Go struct field ConfigMap.immutable of type bool`},
		{name: "apply with a duplicate, Strict", method: http.MethodPatch, url: cms + "/cm?fieldManager=m&fieldValidation=Strict", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  z: '1'\n  z: '2'\n"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  line 7: key \"z\" already set in map"},
		{name: "apply with a duplicate, Ignore", method: http.MethodPatch, url: cms + "/cm?fieldManager=m&fieldValidation=Ignore", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  z: '1'\n  z: '2'\n"), code: http.StatusOK},
		// The reviews and TokenRequest are created, not stored: the same
		// directive applies to their bodies, as in kube's create handler.
		{name: "TokenRequest with a misspelled field, Strict", method: http.MethodPost, url: tokens + "?fieldValidation=Strict", ct: "application/json",
			body: []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSecond":600}}`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `TokenRequest in version "v1" cannot be handled as a TokenRequest: strict decoding error: unknown field "spec.expirationSecond"`},
		{name: "TokenRequest with a misspelled field, default Warn", method: http.MethodPost, url: tokens, ct: "application/json",
			body: []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSecond":600}}`),
			code: http.StatusCreated, warnings: []string{`unknown field "spec.expirationSecond"`}},
		{name: "TokenReview with a duplicate field, Strict", method: http.MethodPost, url: reviews + "?fieldValidation=Strict", ct: "application/json",
			body: []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"a","token":"b","tokn":"c"}}`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `TokenReview in version "v1" cannot be handled as a TokenReview: strict decoding error: duplicate field "spec.token", unknown field "spec.tokn"`},
		{name: "TokenReview with an unknown field, Ignore", method: http.MethodPost, url: reviews + "?fieldValidation=Ignore", ct: "application/json",
			body: []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"a","tokn":"c"}}`),
			code: http.StatusCreated},
		{name: "SelfSubjectReview with an unknown field, Strict", method: http.MethodPost, url: selfReviews + "?fieldValidation=Strict", ct: "application/json",
			body: []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","foo":1}`),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `SelfSubjectReview in version "v1" cannot be handled as a SelfSubjectReview: strict decoding error: unknown field "foo"`},
		// An apply follows the field-validation level for fields the
		// schema does not declare (kube: 500 at every level).
		{name: "apply of fields the schema does not declare, Strict", differs: "an apply's undeclared fields follow the field-validation level (kube: 500)", method: http.MethodPatch, url: cms + "/cm?fieldManager=m&fieldValidation=Strict", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  bar: 2\nfoo: 1\n"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "foo", unknown field "metadata.bar"`},
		{name: "apply of fields the schema does not declare, default Warn", differs: "an apply's undeclared fields follow the field-validation level (kube: 500)", method: http.MethodPatch, url: cms + "/cm?fieldManager=m", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  bar: 2\nfoo: 1\ndata:\n  w: '1'\n"),
			code: http.StatusOK, warnings: []string{`unknown field "foo"`, `unknown field "metadata.bar"`}, orderInsensitive: true},
		{name: "apply of a field the schema does not declare, Ignore", differs: "an apply's undeclared fields follow the field-validation level (kube: 500)", method: http.MethodPatch, url: cms + "/cm?fieldManager=m&fieldValidation=Ignore", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\nfoo: 1\ndata:\n  w: '1'\n"),
			code: http.StatusOK},
		{name: "apply of a field inside a list the schema does not declare, default Warn", differs: "an apply's undeclared fields follow the field-validation level (kube: 500)", method: http.MethodPatch, url: roles + "/r?fieldManager=m", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: r\nrules:\n- verbs: [get]\n  resources: [configmaps]\n  apiGroups: ['']\n  foo: 1\n"),
			code: http.StatusCreated, warnings: []string{`unknown field "rules[0].foo"`}},
		{name: "apply of a value of the wrong type", differs: "an apply's undeclared fields follow the field-validation level (kube: 500)", method: http.MethodPatch, url: cms + "/cm?fieldManager=m&fieldValidation=Ignore", ct: "application/apply-patch+yaml",
			body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata: 5\n"),
			code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest,
			message: "failed to create typed patch object (/cm; /v1, Kind=ConfigMap): .data: expected map, got *"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.differs != "" {
				n.trustplaneOnly(t, tc.differs)
			}
			r := do(t, c, tc.method, tc.url, jsonHeader(tc.ct), tc.body)
			if tc.code >= 300 {
				wantStatus(t, r, tc.code, tc.reason, tc.message)
				if w := r.header.Values("Warning"); len(w) > 0 {
					t.Fatalf("a refused request warns: %q", w)
				}
				return
			}
			if r.code != tc.code {
				t.Fatalf("code %d, want %d: %s", r.code, tc.code, r.body)
			}
			got := warnings(t, r)
			want := tc.warnings
			if tc.orderInsensitive {
				got, want = sortedCopy(got), sortedCopy(want)
			}
			if len(got) != 0 || len(want) != 0 {
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("warnings %q, want %q", got, want)
				}
			}
		})
	}
	// The applies under Warn and Ignore stored what the schema declares,
	// and nothing of the dropped fields.
	if !n.isTrustplane() {
		return
	}
	for _, u := range []string{cms + "/cm", roles + "/r"} {
		r := do(t, c, http.MethodGet, u, nil, nil)
		if r.code != http.StatusOK || strings.Contains(string(r.body), `"foo"`) || strings.Contains(string(r.body), `"bar"`) {
			t.Fatalf("GET %s: %d %s", u, r.code, r.body)
		}
	}
	cm, err := n.clientset().CoreV1().ConfigMaps("default").Get(ctx, "cm", metav1.GetOptions{})
	if err != nil || cm.Data["w"] != "1" {
		t.Fatalf("the applied data is not there: %v %v", cm, err)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
