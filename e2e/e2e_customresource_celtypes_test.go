package e2e_test

import (
	"strings"
	"testing"
	"time"
)

// celTypesCRD maps each schema shape the specification's type table lists
// to its CEL type, one rule each, all of which hold for the object
// TestE2ECustomResourceCELTypes creates: escaped names (a dash, a dot, a
// double underscore, a CEL keyword), format date and date-time as
// timestamps, format duration as a duration, a nullable field's null (an
// absent field to CEL), and the order-insensitive equality of set lists
// and map lists (a set against a literal, and both kinds against their
// old value in transition rules).
const celTypesCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: typed.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: typed, singular: typed, kind: Typed}
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
              sentinel: {type: string}
              foo-bar: {type: string}
              a.b: {type: string}
              x__y: {type: string}
              namespace: {type: string}
              day: {type: string, format: date}
              when: {type: string, format: date-time}
              ttl: {type: string, format: duration}
              maybe: {type: string, nullable: true}
              tags:
                type: array
                maxItems: 4
                x-kubernetes-list-type: set
                items: {type: string, maxLength: 8}
                x-kubernetes-validations:
                - {rule: "self == oldSelf", message: tags are immutable}
              ports:
                type: array
                maxItems: 4
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string, maxLength: 8}
                    port: {type: integer}
                x-kubernetes-validations:
                - {rule: "self == oldSelf", message: ports are immutable}
            x-kubernetes-validations:
            - {rule: "!has(self.sentinel)", message: sentinel}
            - {rule: "self.foo__dash__bar == 'fb'", message: dash}
            - {rule: "self.a__dot__b == 'ab'", message: dot}
            - {rule: "self.x__underscores__y == 'xy'", message: underscores}
            - {rule: "self.__namespace__ == 'ns'", message: keyword}
            - {rule: "self.day == timestamp('2024-01-02T00:00:00Z')", message: date}
            - {rule: "self.when.getFullYear() == 2024 && self.when > self.day", message: date-time}
            - {rule: "self.ttl == duration('90m')", message: duration}
            - {rule: "!has(self.maybe)", message: "null"}
            - {rule: "self.tags == ['b', 'a']", message: set}
`

// TestE2ECustomResourceCELTypes: every rule of celTypesCRD holds (after a
// create that breaks the sentinel rule shows they are evaluated), and a
// rule that reads into preserved unknown fields does not compile: such
// fields are unreadable, as the specification's table says.
func TestE2ECustomResourceCELTypes(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "crd/typed.example.com", "crd/unreadable.example.com")
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("crd", celTypesCRD))
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/typed.example.com")
	obj := func(name, extra string) string {
		return "apiVersion: example.com/v1\nkind: Typed\nmetadata: {name: " + name + "}\nspec:\n" +
			"  foo-bar: fb\n  a.b: ab\n  x__y: xy\n  namespace: ns\n  day: '2024-01-02'\n  when: '2024-05-06T07:08:09Z'\n  ttl: 90m\n  maybe: null\n" +
			"  tags: [a, b]\n  ports: [{name: a, port: 1}, {name: b, port: 2}]\n" + extra
	}
	waitFor(t, 30*time.Second, "typed to be served", func() bool {
		_, err := n.kubectl("get", "typed")
		return err == nil
	})
	out, err := n.kubectl("create", "-f", write("bad", obj("bad", "  sentinel: x\n")))
	if err == nil || !strings.Contains(out, `spec: Invalid value: "object": sentinel`) {
		t.Fatalf("the sentinel rule: %v\n%s", err, out)
	}
	if out, err := n.kubectl("create", "-f", write("good", obj("good", ""))); err != nil {
		t.Fatalf("a rule did not hold: %v\n%s", err, out)
	}
	// Reordered, the set and the map list are equal to their old values;
	// a changed entry is not.
	n.mustKubectl("patch", "typed", "good", "--type=merge", "-p", `{"spec":{"tags":["b","a"],"ports":[{"name":"b","port":2},{"name":"a","port":1}]}}`)
	out, err = n.kubectl("patch", "typed", "good", "--type=merge", "-p", `{"spec":{"ports":[{"name":"b","port":3},{"name":"a","port":1}]}}`)
	if err == nil || !strings.Contains(out, "ports are immutable") {
		t.Fatalf("a changed map list entry: %v\n%s", err, out)
	}

	const unreadable = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: unreadable.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: unreadable, singular: unreadable, kind: Unreadable}
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
              free: {type: object, x-kubernetes-preserve-unknown-fields: true}
            x-kubernetes-validations:
            - {rule: "self.free.anything == 1"}
`
	out, err = n.kubectl("create", "-f", write("unreadable", unreadable))
	if err == nil || !strings.Contains(out, "compilation failed") || !strings.Contains(out, "undefined field 'anything'") {
		t.Fatalf("a rule reading preserved unknown fields: %v\n%s", err, out)
	}
}
