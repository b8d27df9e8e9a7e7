package registry

import (
	"bytes"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// fuzzWidgets is the definition the custom codec targets decode against:
// stored in v1, served in v1 and v2 (conversion None), with what makes
// kube's structural coercion work: nested objects with defaults (one a
// defaulted empty object), an int-or-string with a default, a nullable
// field, a number, a list-map with defaulted items, a string map, a
// preserved object with a known defaulted field, two embedded resources
// (one preserving unknown fields, one with a schema) and a status.
const fuzzWidgets = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.fuzz.example.com, uid: uid-fuzz}
spec:
  group: fuzz.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  conversion: {strategy: None}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: SCHEMA}, subresources: {status: {}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: SCHEMA}, subresources: {status: {}}}
status:
  acceptedNames: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
`

const fuzzWidgetSchema = `
type: object
properties:
  spec:
    type: object
    properties:
      replicas: {type: integer, minimum: 0, default: 1}
      image: {type: string, default: nginx}
      port: {x-kubernetes-int-or-string: true, default: 8080}
      ratio: {type: number}
      note: {type: string, nullable: true}
      tags: {type: array, items: {type: string}}
      selector: {type: object, additionalProperties: {type: string}}
      ports:
        type: array
        x-kubernetes-list-type: map
        x-kubernetes-list-map-keys: [name]
        items:
          type: object
          required: [name]
          properties:
            name: {type: string}
            port: {type: integer, default: 80}
            protocol: {type: string, default: TCP}
      nested:
        type: object
        properties:
          deeper:
            type: object
            default: {}
            properties:
              value: {type: string, default: v}
              count: {type: integer}
      config:
        type: object
        x-kubernetes-preserve-unknown-fields: true
        properties:
          known: {type: integer, default: 3}
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-preserve-unknown-fields: true
      child:
        type: object
        x-kubernetes-embedded-resource: true
        properties:
          spec:
            type: object
            properties:
              x: {type: string, default: d}
  status:
    type: object
    properties:
      ready: {type: boolean}
      conditions:
        type: array
        items: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// fuzzWidgetResources are the Resources of fuzzWidgets, v2 first.
func fuzzWidgetResources(tb testing.TB) []*Resource {
	tb.Helper()
	schemaJSON, err := yaml.YAMLToJSON([]byte(fuzzWidgetSchema))
	if err != nil {
		tb.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(fuzzWidgets, "SCHEMA", string(schemaJSON))), &crd); err != nil {
		tb.Fatal(err)
	}
	resources, err := CustomResources(&crd, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if len(resources) != 2 {
		tb.Fatalf("%d resources, want v1 and v2", len(resources))
	}
	return resources
}

// fuzzWidgetSeeds are realistic bodies: complete and minimal objects,
// unknown fields at every level, wrong types, nulls, duplicates, odd
// numbers, malformed and embedded metadata, in both versions.
var fuzzWidgetSeeds = []string{
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns","labels":{"app":"a"},"annotations":{"k":"v"},"generation":4},` +
		`"spec":{"replicas":3,"image":"busybox","port":"http","ratio":0.5,"note":null,"tags":["a","b"],"selector":{"app":"a"},` +
		`"ports":[{"name":"http","port":8080},{"name":"dns","protocol":"UDP"}],"nested":{"deeper":{"value":"x","count":2}},` +
		`"config":{"known":1,"free":{"form":[1,2,{"x":null}]}},` +
		`"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},"spec":{"containers":[{"name":"c"}]}},` +
		`"child":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"spec":{"x":"y"}}},` +
		`"status":{"ready":true,"conditions":[{"type":"Ready","status":"True","extra":1}]}}`,
	`{"apiVersion":"fuzz.example.com/v2","kind":"Widget","metadata":{"name":"w"}}`,
	`{"apiVersion":"fuzz.example.com/v2","kind":"Widget","metadata":{"name":"w"},"spec":{}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"bogus":1,"nested":{"deeper":{"bogus":true}},"ports":[{"name":"a","bogus":2}]},"bogus":{}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"replicas":"three","port":1.5,"tags":"x","selector":{"a":1}}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"replicas":null,"image":null,"nested":null,"nested2":null,"ports":null}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"replicas":1,"replicas":2}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"ratio":1.0,"replicas":1e3,"nested":{"deeper":{"count":9223372036854775807}},"config":{"big":1e400,"neg":-0}}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w","labels":{"bad key":"x"},"generation":"one","creationTimestamp":"yesterday","ownerReferences":[{}]}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"template":{"apiVersion":"v1","kind":"Pod","metadata":{"name":7,"labels":[]}},"child":{"metadata":{"name":"c","bogus":1},"bogus":2}}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"template":{},"child":{}}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Gadget","metadata":{"name":"w"},"spec":{"bogus":1}}`,
	`{"apiVersion":"other.example.com/v1","kind":"Widget","metadata":{"name":"w"}}`,
	`{"kind":"Widget","metadata":{"name":"w"}}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget"}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":null,"spec":[]}`,
	`{"apiVersion":"fuzz.example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"ports":[{"name":"a"},{"name":"a"}],"tags":[null,"x"]}}`,
	"apiVersion: fuzz.example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  port: 80\n  tags: &t [a, b]\n  selector: {x: *t}\n  config: {? [1] : 2}\n",
	"apiVersion: fuzz.example.com/v2\nkind: Widget\nmetadata: {name: w}\nspec:\n  replicas: 0x10\n  note: ~\n  image: yes\n",
	`[]`, `null`, `{}`, ``, `{"apiVersion":`,
}

// decodeRequest decodes body as the API decodes a create of res:
// res's codecs into its version, the strict serializer of mediaType under
// fieldValidation Warn (or the plain one under Ignore), unknown fields
// being warnings. It returns the object and whether it was decoded.
func decodeRequest(res *Resource, mediaType string, strict bool, body []byte) (runtime.Object, bool) {
	si, ok := runtime.SerializerInfoForMediaType(res.Codecs().SupportedMediaTypes(), mediaType)
	if !ok {
		panic("no serializer for " + mediaType)
	}
	ser := si.Serializer
	if strict {
		ser = si.StrictSerializer
	}
	gvk := res.GVK()
	obj, _, err := res.Codecs().DecoderToVersion(ser, res.Hub()).Decode(body, &gvk, res.NewFunc())
	if err != nil {
		if _, isStrict := runtime.AsStrictDecodingError(err); !isStrict || obj == nil {
			return nil, false
		}
	}
	return obj, true
}

// encodeServed is obj as the API answers it in res's version, in JSON.
func encodeServed(t *testing.T, res *Resource, obj runtime.Object) []byte {
	t.Helper()
	si, _ := runtime.SerializerInfoForMediaType(res.Codecs().SupportedMediaTypes(), runtime.ContentTypeJSON)
	b, err := runtime.Encode(res.Codecs().EncoderForVersion(si.Serializer, res.GVR.GroupVersion()), obj)
	if err != nil {
		t.Fatalf("encoding a decoded object: %v", err)
	}
	return b
}

// storedRoundTrip checks that obj, encoded as res's store encodes it,
// decodes as the store reads it, and that this is a fixed point: the
// object read encodes to the same stored bytes. It returns what was read.
func storedRoundTrip(t *testing.T, res *Resource, obj runtime.Object) runtime.Object {
	t.Helper()
	stored, err := runtime.Encode(res.Custom.Storage, obj)
	if err != nil {
		t.Fatalf("storage encoding of a decoded object: %v", err)
	}
	read, _, err := res.Custom.Storage.Decode(stored, nil, res.NewFunc())
	if err != nil {
		t.Fatalf("the store cannot read what it wrote: %v\n%s", err, stored)
	}
	again, err := runtime.Encode(res.Custom.Storage, read)
	if err != nil {
		t.Fatalf("storage encoding of a read object: %v", err)
	}
	if !bytes.Equal(stored, again) {
		t.Fatalf("a stored object read and written again changed:\n%s\n%s", stored, again)
	}
	return read
}

// FuzzCustomResourceDecode feeds bytes through a custom resource's
// request decoder: JSON or YAML, strict or not, in the storage version or
// the other served one. Nothing may panic, and what decodes is stable: it
// encodes and decodes to the same object, and stored, it reads back as
// the same object (with the generation the create strategy sets).
func FuzzCustomResourceDecode(f *testing.F) {
	resources := fuzzWidgetResources(f)
	for _, s := range fuzzWidgetSeeds {
		for mode := range uint8(4) {
			f.Add([]byte(s), mode, uint8(0))
		}
		f.Add([]byte(s), uint8(0), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode, version uint8) {
		res := resources[int(version)%len(resources)]
		mediaType := runtime.ContentTypeJSON
		if mode%2 == 1 {
			mediaType = runtime.ContentTypeYAML
		}
		obj, ok := decodeRequest(res, mediaType, mode/2%2 == 1, data)
		if !ok || obj.GetObjectKind().GroupVersionKind() != res.GVK() {
			return // refused, or another kind (refused by the strategy)
		}
		served := encodeServed(t, res, obj)
		again, ok := decodeRequest(res, runtime.ContentTypeJSON, false, served)
		if !ok {
			t.Fatalf("a decoded object's encoding does not decode:\n%s", served)
		}
		if twice := encodeServed(t, res, again); !bytes.Equal(served, twice) {
			t.Fatalf("a decoded object encoded and decoded again changed:\n%s\n%s", served, twice)
		}
		prepareForCreate(obj.(*unstructured.Unstructured))
		served = encodeServed(t, res, obj)
		read := storedRoundTrip(t, res, obj)
		if back := encodeServed(t, res, read); !bytes.Equal(served, back) {
			t.Fatalf("a stored object reads back otherwise:\n%s\n%s", served, back)
		}
	})
}

// prepareForCreate fills in the metadata every stored object has, as
// rest.BeforeCreate and the create strategy do before a create is stored:
// a name, a uid, a creation time and generation 1.
func prepareForCreate(u *unstructured.Unstructured) {
	if u.GetName() == "" {
		u.SetName(u.GetGenerateName() + "fuzz")
	}
	u.SetUID("uid-fuzz")
	u.SetCreationTimestamp(metav1.Unix(1700000000, 0))
	u.SetGeneration(1)
}

// FuzzCustomResourceStored feeds bytes to a custom resource's storage
// codec as a stored value, read through either served version. Nothing
// may panic, and a value the store reads writes back as bytes that read
// to the same object again.
func FuzzCustomResourceStored(f *testing.F) {
	resources := fuzzWidgetResources(f)
	for _, s := range fuzzWidgetSeeds {
		f.Add([]byte(s), uint8(0))
	}
	// Stored values as the store writes them, from both versions.
	for i, s := range fuzzWidgetSeeds[:3] {
		for _, res := range resources {
			obj, ok := decodeRequest(res, runtime.ContentTypeJSON, false, []byte(s))
			if !ok {
				f.Fatalf("seed %d does not decode", i)
			}
			stored, err := runtime.Encode(res.Custom.Storage, obj)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(stored, uint8(0))
			f.Add(stored, uint8(1))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, version uint8) {
		res := resources[int(version)%len(resources)]
		obj, _, err := res.Custom.Storage.Decode(data, nil, res.NewFunc())
		if err != nil {
			return
		}
		storedRoundTrip(t, res, obj)
	})
}
