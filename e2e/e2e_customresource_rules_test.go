package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rulesCRD exercises the validation rules the specification describes:
// messageExpression, reason and fieldPath; a transition rule with
// optionalOldSelf; a property name CEL escapes; int-or-string; a set
// list; a map list; and fields whose unknown content is preserved.
const rulesCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rulers.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: rulers, singular: ruler, kind: Ruler}
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
              replicas: {type: integer}
              maxReplicas: {type: integer}
              mode: {type: string, maxLength: 10}
              x-y: {type: integer}
              port: {x-kubernetes-int-or-string: true}
              tags:
                type: array
                maxItems: 10
                x-kubernetes-list-type: set
                items: {type: string, maxLength: 10}
              ports:
                type: array
                maxItems: 10
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string, maxLength: 10}
                    number: {type: integer}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
            x-kubernetes-validations:
            - rule: "!has(self.replicas) || !has(self.maxReplicas) || self.replicas <= self.maxReplicas"
              messageExpression: "has(self.mode) && self.mode == 'fast' ? 'too many replicas for fast mode' : 'too many replicas'"
              reason: FieldValueForbidden
              fieldPath: .replicas
            - rule: "oldSelf.hasValue() ? (!has(self.mode) || !has(oldSelf.value().mode) || self.mode == oldSelf.value().mode) : true"
              optionalOldSelf: true
              message: "mode is immutable"
            - rule: "!has(self.x__dash__y) || self.x__dash__y > 0"
              message: "x-y must be positive"
            - rule: "!has(self.port) || (type(self.port) == int ? self.port > 0 : self.port.startsWith('http'))"
              message: "port is a positive number or a named http port"
            - rule: "!has(self.ports) || self.ports.all(p, !has(p.number) || p.number < 65536)"
              message: "port numbers are below 65536"
`

// TestE2ECustomResourceValidationRules: each rule refuses what breaks it
// with kube's message, and takes what keeps it (issue 17 point 2). Run
// against kube-apiserver, it checks the messages are kube's.
func TestE2ECustomResourceValidationRules(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "crd/rulers.example.com")
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("crd", rulesCRD))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/rulers.example.com")
	ruler := func(name, spec string) string {
		return "apiVersion: example.com/v1\nkind: Ruler\nmetadata: {name: " + name + "}\nspec: " + spec + "\n"
	}
	waitFor(t, 30*time.Second, "rulers to be served", func() bool {
		_, err := n.kubectl("get", "rulers")
		return err == nil
	})
	for _, tc := range []struct {
		name, spec, want string
	}{
		{"messageExpression, reason and fieldPath", "{replicas: 5, maxReplicas: 3, mode: fast}",
			`The Ruler "bad" is invalid: spec.replicas: Forbidden: too many replicas for fast mode`},
		{"an escaped property name", `{"x-y": 0}`,
			`The Ruler "bad" is invalid: spec: Invalid value: "object": x-y must be positive`},
		{"int-or-string as a number", "{port: 0}",
			`The Ruler "bad" is invalid: spec: Invalid value: "object": port is a positive number or a named http port`},
		{"int-or-string as a string", "{port: ftp}",
			`The Ruler "bad" is invalid: spec: Invalid value: "object": port is a positive number or a named http port`},
		{"a map list", "{ports: [{name: a, number: 70000}]}",
			`The Ruler "bad" is invalid: spec: Invalid value: "object": port numbers are below 65536`},
		{"a set list with a duplicate", "{tags: [a, a]}",
			`The Ruler "bad" is invalid: spec.tags[1]: Duplicate value: "a"`},
	} {
		out, err := n.kubectl("create", "-f", write("bad", ruler("bad", tc.spec)))
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %v\n%s\nwant %s", tc.name, err, out, tc.want)
		}
	}
	good := `{replicas: 2, maxReplicas: 3, mode: fast, "x-y": 1, port: http-alt, tags: [a, b], ports: [{name: a, number: 80}], extra: {anything: [1, 2]}}`
	n.mustKubectl("create", "-f", write("good", ruler("good", good)))
	if out := n.mustKubectl("get", "ruler", "good", "-o", "jsonpath={.spec.extra.anything}"); out != "[1,2]" {
		t.Fatalf("preserved unknown fields: %q", out)
	}
	// The transition rule sees the old object on updates only.
	out, err := n.kubectl("patch", "ruler", "good", "--type=merge", "-p", `{"spec":{"mode":"slow"}}`)
	if err == nil || !strings.Contains(out, `The Ruler "good" is invalid: spec: Invalid value: "object": mode is immutable`) {
		t.Fatalf("changing mode: %v\n%s", err, out)
	}
	n.mustKubectl("patch", "ruler", "good", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
}

// labelsCRD is a definition whose rule takes a two-variable
// comprehension, which CEL has from kube 1.32.
const labelsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: NAME.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: NAME, singular: SINGULAR, kind: KIND}
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
              labels:
                type: object
                maxProperties: 10
                additionalProperties: {type: string, maxLength: 20}
            x-kubernetes-validations:
            - rule: "!has(self.labels) || self.labels.all(k, v, v != 'forbidden')"
              message: "no label may be forbidden"
`

// TestE2ECustomResourceRollback: a rule stored under one release keeps
// being enforced after a rollback to an emulated release whose CEL lacks
// its library, while a new definition using that library is refused
// (issue 17 point 2, as TestE2EAdmissionPolicyRollback for policies).
func TestE2ECustomResourceRollback(t *testing.T) {
	n := startNode(t)
	n.needsProcess("restart")
	dir := t.TempDir()
	crd := func(plural, singular, kind string) string {
		p := filepath.Join(dir, plural+".yaml")
		text := strings.NewReplacer("NAME", plural, "SINGULAR", singular, "KIND", kind).Replace(labelsCRD)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	obj := func(name, value string) string {
		p := filepath.Join(dir, name+".yaml")
		text := "apiVersion: example.com/v1\nkind: Labeled\nmetadata: {name: " + name + "}\nspec: {labels: {a: " + value + "}}\n"
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n.mustKubectl("apply", "-f", crd("labeleds", "labeled", "Labeled"))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/labeleds.example.com")
	waitFor(t, 30*time.Second, "labeleds to be served", func() bool {
		out, err := n.kubectl("create", "-f", obj("bad", "forbidden"))
		return err != nil && strings.Contains(out, "no label may be forbidden")
	})

	n.args = append(n.args, "--emulated-version=1.32")
	n.restart()
	// The stored rule is still enforced.
	waitFor(t, 30*time.Second, "labeleds to be served after the restart", func() bool {
		_, err := n.kubectl("get", "labeleds")
		return err == nil
	})
	out, err := n.kubectl("create", "-f", obj("bad", "forbidden"))
	if err == nil || !strings.Contains(out, `The Labeled "bad" is invalid: spec: Invalid value: "object": no label may be forbidden`) {
		t.Fatalf("the stored rule after the rollback: %v\n%s", err, out)
	}
	n.mustKubectl("create", "-f", obj("good", "fine"))
	// A new definition may only use what 1.31's CEL has.
	out, err = n.kubectl("apply", "-f", crd("others", "other", "Other"))
	if err == nil || !strings.Contains(out, `The CustomResourceDefinition "others.example.com" is invalid`) || !strings.Contains(out, "compilation failed") {
		t.Fatalf("a new two-variable comprehension at 1.32: %v\n%s", err, out)
	}
}

// TestE2ECustomResourceRuntimeBudgets: rules whose estimated cost passes
// the definition's checks are still cut off at run time by kube's limits:
// one evaluation costing over the per-call limit, and all of an object's
// evaluations together over the per-object budget (issue 17 point 2).
func TestE2ECustomResourceRuntimeBudgets(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "crd/budgets.example.com")
	write := manifests(t)
	var rules strings.Builder
	for i := 0; i < 15; i++ {
		fmt.Fprintf(&rules, "            - rule: \"self.items.all(a, self.items.exists(b, a == b))\"\n              message: m%d\n", i)
	}
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: budgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: budgets, singular: budget, kind: Budget}
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
              items:
                type: array
                maxItems: 600
                items: {type: string, maxLength: 8}
            x-kubernetes-validations:
` + rules.String()
	n.mustKubectl("apply", "-f", write("crd", crd))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/budgets.example.com")
	object := func(name string, items int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: example.com/v1\nkind: Budget\nmetadata: {name: %s}\nspec:\n  items:\n", name)
		for i := 0; i < items; i++ {
			fmt.Fprintf(&b, "  - i%d\n", i)
		}
		return write(name, b.String())
	}
	waitFor(t, 30*time.Second, "budgets to be served", func() bool {
		_, err := n.kubectl("create", "--dry-run=server", "-f", object("small", 10))
		return err == nil
	})
	for _, tc := range []struct {
		name  string
		items int
		want  string
	}{
		{"one evaluation over the per-call limit", 600, "no further validation rules will be run due to call cost exceeds limit for rule: m0"},
		{"the object's evaluations over the budget", 500, "validation failed due to running out of cost budget, no further validation rules will be run"},
	} {
		out, err := n.kubectl("create", "-f", object("big", tc.items))
		if err == nil || !strings.Contains(out, `The Budget "big" is invalid`) || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %v\n%s", tc.name, err, out)
		}
	}
	n.mustKubectl("create", "-f", object("small", 10))
}
