package e2e_test

import (
	"strings"
	"testing"
)

// widgetsCRD is a definition kubectl applies: namespaced, v1, with a
// structural schema, a short name and a category.
const widgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
`

// TestE2ECustomResourceDefinitions: kubectl manages definitions as it
// does on kube-apiserver: apply, kube's validation messages, the naming
// and API-approval controllers' conditions, the table, short names, and a
// delete that completes through the cleanup finalizer.
func TestE2ECustomResourceDefinitions(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "crd/widgets.example.com", "crd/gadgets.example.com", "crd/things.policy.k8s.io")
	write := manifests(t)
	if out := n.mustKubectl("apply", "-f", write("widgets", widgetsCRD)); !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created") {
		t.Fatalf("apply: %s", out)
	}
	n.mustKubectl("wait", "--for=condition=NamesAccepted", "--timeout=60s", "crd/widgets.example.com")
	if out := n.mustKubectl("get", "crd", "widgets.example.com", "-o", "jsonpath={.status.acceptedNames.shortNames[0]} {.status.storedVersions[0]}"); out != "wd v1" {
		t.Fatalf("accepted names and stored versions: %q, want %q", out, "wd v1")
	}
	out := n.mustKubectl("get", "crds")
	if lines := strings.Split(out, "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "CREATED AT") || !strings.HasPrefix(lines[1], "widgets.example.com") {
		t.Fatalf("kubectl get crds:\n%s", out)
	}
	if out := n.mustKubectl("api-resources", "--api-group", "apiextensions.k8s.io"); !strings.Contains(out, "customresourcedefinitions") || !strings.Contains(out, "crd,crds") {
		t.Fatalf("api-resources:\n%s", out)
	}

	// A schema that is not structural: kube's message.
	bad := strings.NewReplacer("widgets", "gadgets", "widget", "gadget", "Widget", "Gadget", "shortNames: [wd]", "shortNames: [gd]",
		"          spec:\n            type: object\n", "          spec:\n").Replace(widgetsCRD)
	out, err := n.kubectl("apply", "-f", write("gadgets", bad))
	if err == nil || !strings.Contains(out, `The CustomResourceDefinition "gadgets.example.com" is invalid`) ||
		!strings.Contains(out, "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields") {
		t.Fatalf("a schema that is not structural: %v\n%s", err, out)
	}

	// A definition in a protected group needs the approval annotation; one
	// that says it is unapproved is served with the condition false.
	protected := strings.NewReplacer("widgets.example.com", "things.policy.k8s.io", "group: example.com", "group: policy.k8s.io",
		"widgets", "things", "widget", "thing", "Widget", "Thing", "shortNames: [wd]", "shortNames: [th]").Replace(widgetsCRD)
	out, err = n.kubectl("apply", "-f", write("protected", protected))
	if err == nil || !strings.Contains(out, `metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation "api-approved.kubernetes.io"`) {
		t.Fatalf("a protected group without approval: %v\n%s", err, out)
	}
	things := strings.NewReplacer("  name: widgets.example.com\n", "  name: things.policy.k8s.io\n  annotations:\n    api-approved.kubernetes.io: unapproved, experimental-only\n", "group: example.com", "group: policy.k8s.io",
		"widgets", "things", "widget", "thing", "Widget", "Thing", "shortNames: [wd]", "shortNames: [th]").Replace(widgetsCRD)
	// (Server-side this time: the definition's own schema drives apply.)
	if out := n.mustKubectl("apply", "--server-side", "-f", write("things", things)); !strings.Contains(out, "serverside-applied") {
		t.Fatalf("server-side apply: %s", out)
	}
	n.mustKubectl("wait", "--for=condition=KubernetesAPIApprovalPolicyConformant=false", "--timeout=60s", "crd/things.policy.k8s.io")

	// The delete marks the definition Terminating; the finalizer, with no
	// objects to delete, lets it go.
	if out := n.mustKubectl("delete", "crd", "widgets.example.com", "--timeout=60s"); !strings.Contains(out, `"widgets.example.com" deleted`) {
		t.Fatalf("delete: %s", out)
	}
	if out, err := n.kubectl("get", "crd", "widgets.example.com"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("after the delete: %v\n%s", err, out)
	}
}
