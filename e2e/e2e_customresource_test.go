package e2e_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// gizmosCRD has what custom objects are checked against: a default, an
// OpenAPI minimum, a validation rule on self, a status subresource, a
// printer column and a selectable field.
const gizmosCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, shortNames: [gz], categories: [toys]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    selectableFields:
    - jsonPath: .spec.color
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1, default: 3}
              color: {type: string}
            x-kubernetes-validations:
            - rule: "self.size <= 10"
              message: "size must be at most 10"
          status:
            type: object
            properties:
              ready: {type: boolean}
              replicas: {type: integer}
              selector: {type: string}
`

// gizmoPolicy refuses pink gizmos, with the size in its message.
const gizmoPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: e2e-gizmo-colors}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [example.com], apiVersions: ["*"], operations: [CREATE, UPDATE], resources: [gizmos]}
  validations:
  - expression: "!has(object.spec.color) || object.spec.color != 'pink'"
    messageExpression: "'a gizmo of size ' + string(object.spec.size) + ' may not be pink'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: e2e-gizmo-colors}
spec:
  policyName: e2e-gizmo-colors
  validationActions: [Deny]
`

// customNodes is a three-node cluster, or the external server alone.
func customNodes(t *testing.T) []*node {
	if os.Getenv(externalEnv) != "" {
		return []*node{startNode(t)}
	}
	return startCluster(t, 3)
}

// TestE2ECustomResources: a definition's objects are served on every
// node as kube-apiserver serves them: its schema prunes, defaults and
// validates (rules included), kubectl's table shows its columns, patches,
// server-side apply, the status subresource, field selectors, paging and
// watches work, and deleting the definition deletes its objects.
func TestE2ECustomResources(t *testing.T) {
	nodes := customNodes(t)
	n := nodes[0]
	other := nodes[len(nodes)-1]
	n.scrub(t, "crd/gizmos.example.com")
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("crd", gizmosCRD))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/gizmos.example.com")
	for _, m := range nodes {
		waitFor(t, 30*time.Second, m.name+" to serve gizmos", func() bool {
			out, err := m.kubectl("api-resources", "--api-group", "example.com")
			return err == nil && strings.Contains(out, "gizmos") && strings.Contains(out, "gz")
		})
	}

	// OpenAPI describes the kind: kubectl explain reads it.
	waitFor(t, 30*time.Second, "kubectl explain to know gizmos", func() bool {
		out, err := other.kubectl("explain", "gizmo.spec")
		return err == nil && strings.Contains(out, "KIND:       Gizmo") && strings.Contains(out, "size\t<integer>") && strings.Contains(out, "color\t<string>")
	})

	waitFor(t, 30*time.Second, "OpenAPI v2 to define Gizmo", func() bool {
		out, err := other.kubectl("get", "--raw", "/openapi/v2")
		return err == nil && strings.Contains(out, `"com.example.v1.Gizmo":{`) && strings.Contains(out, `"/apis/example.com/v1/namespaces/{namespace}/gizmos/{name}"`)
	})

	gizmo := func(name, spec string) string {
		return "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: " + name + "}\nspec: " + spec + "\n"
	}
	// Unknown fields: kubectl asks for Strict, and kube names the field.
	out, err := n.kubectl("create", "-f", write("bogus", gizmo("g0", "{color: red, bogus: 1}")))
	if err == nil || !strings.Contains(out, `Gizmo in version "v1" cannot be handled as a Gizmo: strict decoding error: unknown field "spec.bogus"`) {
		t.Fatalf("an unknown field under Strict: %v\n%s", err, out)
	}
	// Warn prunes it and says so.
	out = n.mustKubectl("create", "--validate=warn", "-f", write("g0", gizmo("g0", "{color: blue, bogus: 1}")))
	if !strings.Contains(out, `Warning: unknown field "spec.bogus"`) {
		t.Fatalf("an unknown field under Warn: %s", out)
	}
	if out := other.mustKubectl("get", "gz", "g0", "-o", "jsonpath={.spec}"); out != `{"color":"blue","size":3}` {
		t.Fatalf("pruned under Warn: %s", out)
	}
	n.mustKubectl("delete", "gz", "g0")
	// Ignore prunes it.
	n.mustKubectl("create", "--validate=false", "-f", write("g1", gizmo("g1", "{color: red, bogus: 1}")))
	if out := other.mustKubectl("get", "gz", "g1", "-o", "jsonpath={.spec}"); out != `{"color":"red","size":3}` {
		t.Fatalf("pruned and defaulted, read through another node: %s", out)
	}
	// The OpenAPI schema and the validation rule, with kube's messages.
	out, err = n.kubectl("create", "-f", write("small", gizmo("g2", "{size: 0}")))
	if err == nil || !strings.Contains(out, `The Gizmo "g2" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`) {
		t.Fatalf("minimum: %v\n%s", err, out)
	}
	out, err = n.kubectl("create", "-f", write("big", gizmo("g2", "{size: 11}")))
	if err == nil || !strings.Contains(out, `The Gizmo "g2" is invalid: spec: Invalid value: "object": size must be at most 10`) {
		t.Fatalf("validation rule: %v\n%s", err, out)
	}
	// Server-side apply types the object from the schema: integers stay
	// integers (the rule compares them), and a second manager conflicts.
	if out := n.mustKubectl("apply", "--server-side", "--field-manager=a", "-f", write("g2", gizmo("g2", "{size: 5, color: blue}"))); !strings.Contains(out, "serverside-applied") {
		t.Fatalf("server-side apply: %s", out)
	}
	out, err = other.kubectl("apply", "--server-side", "--field-manager=b", "-f", write("g2b", gizmo("g2", "{size: 6}")))
	if err == nil || !strings.Contains(out, `conflict with "a": .spec.size`) {
		t.Fatalf("a second manager: %v\n%s", err, out)
	}
	// Patches: merge and JSON; strategic merge is not for custom objects.
	n.mustKubectl("patch", "gz", "g2", "--type=merge", "-p", `{"spec":{"size":7}}`)
	before := n.mustKubectl("get", "gz", "g2", "-o", "jsonpath={.metadata.resourceVersion}")
	other.mustKubectl("patch", "gz", "g2", "--type=json", "-p", `[{"op":"replace","path":"/spec/color","value":"green"}]`)
	out, err = n.kubectl("patch", "gz", "g2", "--type=strategic", "-p", `{"spec":{"size":2}}`)
	if err == nil || !strings.Contains(out, "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml") {
		t.Fatalf("strategic merge patch: %v\n%s", err, out)
	}
	// The status subresource owns status; the resource does not.
	n.mustKubectl("patch", "gz", "g2", "--subresource=status", "--type=merge", "-p", `{"status":{"ready":true}}`)
	n.mustKubectl("patch", "gz", "g2", "--type=merge", "-p", `{"status":{"ready":false}}`)
	if out := other.mustKubectl("get", "gz", "g2", "-o", "jsonpath={.spec.size} {.spec.color} {.status.ready}"); out != "7 green true" {
		t.Fatalf("after the patches: %q", out)
	}
	// The scale subresource reads and writes the replicas paths.
	n.mustKubectl("patch", "gz", "g2", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":2,"selector":"app=g2"}}`)
	var scale struct {
		Kind, APIVersion string
		Spec             struct{ Replicas int }
		Status           struct {
			Replicas int
			Selector string
		}
	}
	if err := json.Unmarshal([]byte(other.mustKubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/gizmos/g2/scale")), &scale); err != nil {
		t.Fatal(err)
	}
	if scale.Kind != "Scale" || scale.APIVersion != "autoscaling/v1" || scale.Spec.Replicas != 7 || scale.Status.Replicas != 2 || scale.Status.Selector != "app=g2" {
		t.Fatalf("scale: %+v", scale)
	}
	if out := n.mustKubectl("scale", "gz", "g2", "--replicas=9"); !strings.Contains(out, "gizmo.example.com/g2 scaled") {
		t.Fatalf("kubectl scale: %s", out)
	}
	out, err = other.kubectl("scale", "gz", "g2", "--replicas=11")
	if err == nil || !strings.Contains(out, `size must be at most 10`) {
		t.Fatalf("scaling past the rule: %v\n%s", err, out)
	}
	// A failed JSON patch test and a stale resourceVersion change nothing.
	out, err = n.kubectl("patch", "gz", "g2", "--subresource=scale", "--type=json", "-p", `[{"op":"test","path":"/spec/replicas","value":99},{"op":"replace","path":"/spec/replicas","value":1}]`)
	if err == nil || !strings.Contains(out, "The request is invalid: the server rejected our request due to an error in our request") {
		t.Fatalf("a failed test operation on scale: %v\n%s", err, out)
	}
	stale := `{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"g2","namespace":"default","resourceVersion":"` + before + `"},"spec":{"replicas":1}}`
	out, err = other.kubectl("replace", "--raw", "/apis/example.com/v1/namespaces/default/gizmos/g2/scale", "-f", write("stale", stale))
	if err == nil || !strings.Contains(out, `Operation cannot be fulfilled on gizmos.example.com "g2": the object has been modified`) {
		t.Fatalf("a scale at a stale resourceVersion: %v\n%s", err, out)
	}
	if out := other.mustKubectl("get", "gz", "g2", "-o", "jsonpath={.spec.size}"); out != "9" {
		t.Fatalf("size after refused scale writes: %q", out)
	}
	n.mustKubectl("patch", "gz", "g2", "--subresource=scale", "--type=merge", "-p", `{"spec":{"replicas":7}}`)
	if out := other.mustKubectl("get", "gz", "g2", "-o", "jsonpath={.spec.size}"); out != "7" {
		t.Fatalf("size after scaling: %q", out)
	}
	if out := n.mustKubectl("api-resources", "--api-group", "example.com", "-o", "wide"); !strings.Contains(out, "gizmos") {
		t.Fatalf("api-resources: %s", out)
	}
	if out := n.mustKubectl("get", "--raw", "/apis/example.com/v1"); !strings.Contains(out, `{"name":"gizmos/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]}`) {
		t.Fatalf("discovery of gizmos/scale: %s", out)
	}

	// Categories reach kubectl through discovery.
	if out := other.mustKubectl("get", "toys", "-o", "name"); !strings.Contains(out, "gizmo.example.com/g2") {
		t.Fatalf("kubectl get toys: %q", out)
	}
	// RBAC grants by the definition's group and resource.
	n.scrub(t, "role/e2e-gizmo-reader", "rolebinding/e2e-gizmo-reader")
	n.mustKubectl("create", "role", "e2e-gizmo-reader", "--verb=get,list", "--resource=gizmos.example.com")
	n.mustKubectl("create", "rolebinding", "e2e-gizmo-reader", "--role=e2e-gizmo-reader", "--user=jane")
	waitFor(t, 30*time.Second, "jane to read gizmos", func() bool {
		_, err := other.kubectl("--as=jane", "get", "gz", "g2")
		return err == nil
	})
	out, err = other.kubectl("--as=jane", "delete", "gz", "g2")
	if err == nil || !strings.Contains(out, `gizmos.example.com "g2" is forbidden: User "jane" cannot delete resource "gizmos" in API group "example.com" in the namespace "default"`) {
		t.Fatalf("jane deletes a gizmo: %v\n%s", err, out)
	}

	// The table has the definition's columns.
	out = n.mustKubectl("get", "gizmos")
	if lines := strings.Split(out, "\n"); len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME SIZE COLOR" ||
		strings.Join(strings.Fields(lines[2]), " ") != "g2 7 green" {
		t.Fatalf("kubectl get gizmos:\n%s", out)
	}
	// Field selectors: metadata and the selectable field; others refused.
	if out := other.mustKubectl("get", "gz", "--field-selector", "spec.color=red", "-o", "name"); out != "gizmo.example.com/g1" {
		t.Fatalf("selectable field: %q", out)
	}
	out, err = n.kubectl("get", "gz", "--field-selector", "spec.size=7")
	if err == nil || !strings.Contains(out, "field label not supported: spec.size") {
		t.Fatalf("a field that is not selectable: %v\n%s", err, out)
	}
	// Dry run stores nothing.
	n.mustKubectl("create", "--dry-run=server", "-f", write("g3", gizmo("g3", "{size: 4}")))
	if out, err := n.kubectl("get", "gz", "g3"); err == nil || !strings.Contains(out, `gizmos.example.com "g3" not found`) {
		t.Fatalf("after a dry run: %v\n%s", err, out)
	}
	// Custom objects have no protobuf encoding: kube's 406.
	for _, path := range []string{"/apis/example.com/v1/namespaces/default/gizmos/g2", "/apis/example.com/v1/namespaces/default/gizmos",
		"/apis/example.com/v1/namespaces/default/gizmos?watch=1&timeoutSeconds=1"} {
		req, err := http.NewRequest(http.MethodGet, n.restConfig().Host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
		resp, err := n.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotAcceptable || !bytes.Contains(body, []byte("only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf")) {
			t.Fatalf("GET %s as protobuf: %d %q", path, resp.StatusCode, body)
		}
	}

	// Protobuf first and JSON next: JSON, as the specification says (kube
	// answers 406, kubernetes/kubernetes#86253), for every verb.
	protoThenJSON := map[string]string{"Accept": "application/vnd.kubernetes.protobuf, application/json", "Content-Type": "application/json"}
	gizmos := n.url() + "/apis/example.com/v1/namespaces/default/gizmos"
	for _, c := range []struct {
		method, path string
		header       map[string]string
		body         string
		code         int
	}{
		{http.MethodGet, "/g2", nil, "", http.StatusOK},
		{http.MethodGet, "", nil, "", http.StatusOK},
		{http.MethodGet, "?watch=1&timeoutSeconds=1", nil, "", http.StatusOK},
		{http.MethodPost, "", nil, `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"pj"},"spec":{"size":1}}`, http.StatusCreated},
		{http.MethodPatch, "/pj", map[string]string{"Content-Type": "application/merge-patch+json"}, `{"spec":{"size":2}}`, http.StatusOK},
		{http.MethodDelete, "/pj", nil, "", http.StatusOK},
	} {
		h := map[string]string{}
		for k, v := range protoThenJSON {
			h[k] = v
		}
		for k, v := range c.header {
			h[k] = v
		}
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := do(t, n.httpClient(), c.method, gizmos+c.path, h, body)
		if r.code != c.code || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || !json.Valid(bytes.SplitN(r.body, []byte("\n"), 2)[0]) {
			t.Fatalf("%s %s as protobuf, then JSON: %d %s %q", c.method, c.path, r.code, r.header.Get("Content-Type"), r.body)
		}
	}

	// Paging, and a watch from a resourceVersion replays what followed.
	var page struct {
		Kind     string
		Metadata struct{ Continue string }
		Items    []struct{ Kind, APIVersion string }
	}
	if err := json.Unmarshal([]byte(other.mustKubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/gizmos?limit=1")), &page); err != nil {
		t.Fatal(err)
	}
	if page.Kind != "GizmoList" || len(page.Items) != 1 || page.Metadata.Continue == "" || page.Items[0].Kind != "Gizmo" || page.Items[0].APIVersion != "example.com/v1" {
		t.Fatalf("a page of one: %+v", page)
	}
	// A list at an exact past resourceVersion shows the object as it was.
	exact := other.mustKubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/gizmos?resourceVersionMatch=Exact&resourceVersion="+before)
	if !strings.Contains(exact, `"resourceVersion":"`+before+`"`) || !strings.Contains(exact, `"color":"blue"`) || strings.Contains(exact, `"color":"green"`) {
		t.Fatalf("a list at resourceVersion %s (Exact):\n%s", before, exact)
	}
	// The rest of the resourceVersion table, as for built-in kinds.
	base := "/apis/example.com/v1/namespaces/default/gizmos"
	for _, q := range []string{"", "?resourceVersion=0", "?resourceVersion=" + before + "&resourceVersionMatch=NotOlderThan", "/g2?resourceVersion=0", "/g2?resourceVersion=" + before} {
		if out, err := other.kubectl("get", "--raw", base+q); err != nil || !strings.Contains(out, `"kind":"Gizmo`) {
			t.Fatalf("GET %s: %v\n%s", base+q, err, out)
		}
	}
	out, err = other.kubectl("get", "--raw", base+"?resourceVersionMatch=Exact")
	if err == nil || !strings.Contains(out, "resourceVersionMatch is forbidden unless resourceVersion is provided") {
		t.Fatalf("Exact without a resourceVersion: %v\n%s", err, out)
	}
	out = other.mustKubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/gizmos?watch=1&timeoutSeconds=2&resourceVersion="+before)
	if !strings.Contains(out, `{"type":"MODIFIED","object":{"apiVersion":"example.com/v1","kind":"Gizmo"`) || !strings.Contains(out, `"color":"green"`) {
		t.Fatalf("watch from %s:\n%s", before, out)
	}

	// A ValidatingAdmissionPolicy matches custom resources by group and
	// resource, and its CEL sees the object as the schema types it.
	n.scrub(t, "validatingadmissionpolicy/e2e-gizmo-colors", "validatingadmissionpolicybinding/e2e-gizmo-colors")
	n.mustKubectl("apply", "-f", write("policy", gizmoPolicy))
	waitFor(t, 30*time.Second, "the gizmo policy to be enforced", func() bool {
		_, err := other.kubectl("create", "--dry-run=server", "-f", write("pink", gizmo("g4", "{size: 4, color: pink}")))
		return err != nil
	})
	out, err = other.kubectl("create", "-f", write("pink", gizmo("g4", "{size: 4, color: pink}")))
	if err == nil || !strings.Contains(out, `The gizmos "g4" is invalid: : ValidatingAdmissionPolicy 'e2e-gizmo-colors' with binding 'e2e-gizmo-colors' denied request: a gizmo of size 4 may not be pink`) {
		t.Fatalf("a policy on gizmos: %v\n%s", err, out)
	}
	n.mustKubectl("create", "-f", write("g4", gizmo("g4", "{size: 4, color: red}")))
	n.mustKubectl("delete", "validatingadmissionpolicybinding/e2e-gizmo-colors", "validatingadmissionpolicy/e2e-gizmo-colors")

	// Finalizers hold a custom object's deletion; the garbage collector
	// deletes what a custom object owns once it is gone.
	n.mustKubectl("create", "-f", write("g5", "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g5, finalizers: [example.com/hold]}\nspec: {size: 2}\n"))
	n.mustKubectl("delete", "gz", "g5", "--wait=false")
	if out := other.mustKubectl("get", "gz", "g5", "-o", "jsonpath={.metadata.deletionTimestamp}"); out == "" {
		t.Fatal("a deleted gizmo with a finalizer has no deletionTimestamp")
	}
	n.mustKubectl("patch", "gz", "g5", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	if out, err := other.kubectl("get", "gz", "g5"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("after its finalizer went: %v\n%s", err, out)
	}
	uid := n.mustKubectl("get", "gz", "g1", "-o", "jsonpath={.metadata.uid}")
	n.scrub(t, "configmap/e2e-gizmo-owned")
	n.mustKubectl("create", "-f", write("owned", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: e2e-gizmo-owned\n  ownerReferences:\n  - {apiVersion: example.com/v1, kind: Gizmo, name: g1, uid: "+uid+"}\n"))
	n.mustKubectl("delete", "gz", "g1")
	waitFor(t, 90*time.Second, "the garbage collector to delete what g1 owned", func() bool {
		out, err := other.kubectl("get", "configmap", "e2e-gizmo-owned")
		return err != nil && strings.Contains(out, "NotFound")
	})

	// Deleting the definition deletes its objects: defined again, it has none.
	n.mustKubectl("delete", "crd", "gizmos.example.com", "--timeout=60s")
	n.mustKubectl("apply", "-f", write("crd", gizmosCRD))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/gizmos.example.com")
	waitFor(t, 30*time.Second, "gizmos to be served again", func() bool {
		out, err := other.kubectl("get", "gizmos", "-A")
		return err == nil && strings.Contains(out, "No resources found")
	})
}
