package apply

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// Fuzz targets for the patch and apply decoders: every function here takes
// bytes a client sent. Seeds are added below and under testdata/fuzz; plain
// go test runs them, make fuzz explores further (scripts/fuzz.sh).
//
// The property is the package's contract: no panic, and an error is always
// one of the sentinels the api package maps to a status code. A panic of a
// patch library comes back as ErrPatchPanicked (recoverPatch); the inputs
// that found such panics are kept in testdata/fuzz.

// fuzzOriginal is the stored form of a small Pod, what a patch usually
// lands on.
const fuzzOriginal = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","labels":{"a":"b"},` +
	`"finalizers":["x/y"]},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"protocol":"TCP"}],` +
	`"env":[{"name":"A","value":"1"}]}],"tolerations":[{"key":"k","operator":"Exists"}]}}`

// hostileJSON are documents every JSON decoder here is fed: deep nesting,
// huge numbers, invalid UTF-8, duplicate keys, truncation.
var hostileJSON = []string{
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000),
	`{"a":1e999999999}`,
	`{"a":-0.0000000000000000000000000000001e-99999}`,
	`{"a":123456789012345678901234567890123456789012345678901234567890}`,
	"{\"a\":\"\xff\xfe\"}",
	"{\"\xc3\x28\":1}",
	`{"a":1,"a":2}`,
	`{"a":{"b":1}`,
	`[{"op":"add","path":"/a"`,
	``,
	`null`,
	`"\ud800"`,
}

func FuzzJSONPatch(f *testing.F) {
	for _, p := range []string{
		`[{"op":"add","path":"/metadata/labels/c","value":"d"}]`,
		`[{"op":"remove","path":"/spec/containers/0/env"}]`,
		`[{"op":"replace","path":"/metadata/name","value":"q"}]`,
		`[{"op":"test","path":"/metadata/name","value":"p"},{"op":"move","from":"/metadata/labels","path":"/metadata/annotations"}]`,
		`[{"op":"copy","from":"/spec","path":"/spec/x"},{"op":"copy","from":"/spec","path":"/spec/y"},{"op":"copy","from":"/spec","path":"/spec/z"}]`,
		`[{"op":"add","path":"/spec/containers/-","value":{"name":"d","image":"i"}}]`,
		`[{"op":"add","path":"/spec/containers/-1","value":1}]`,
		`[{"op":"add","path":"/spec/containers/99999999999999999999","value":1}]`,
		`[{"op":"remove","path":""}]`,
		`[{"op":"add","path":"/a~2b~","value":1}]`,
		`[{"op":"bogus","path":"/a"}]`,
		`{"op":"add"}`,
		`[{"op":"add","path":"/a","value":1,"op":"remove"}]`,
	} {
		f.Add([]byte(fuzzOriginal), []byte(p))
	}
	for _, h := range hostileJSON {
		f.Add([]byte(fuzzOriginal), []byte(h))
		f.Add([]byte(h), []byte(`[{"op":"add","path":"/a","value":1}]`))
	}
	f.Fuzz(func(t *testing.T, original, patch []byte) {
		out, err := JSONPatch(original, patch)
		if err != nil {
			if !errors.Is(err, ErrBadPatch) && !errors.Is(err, ErrPatchFailed) && !errors.Is(err, ErrTooManyOperations) && !errors.Is(err, ErrPatchPanicked) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		// The copy budget bounds what a patch can grow a document by.
		if len(out) > len(original)+len(patch)+MaxJSONPatchCopyBytes+1<<20 {
			t.Fatalf("a %d-byte patch grew a %d-byte document to %d bytes", len(patch), len(original), len(out))
		}
	})
}

func FuzzMergePatch(f *testing.F) {
	for _, p := range []string{
		`{"metadata":{"labels":{"a":null,"c":"d"}}}`,
		`{"spec":{"containers":[{"name":"c","image":"j"}]}}`,
		`{"metadata":null}`,
		`{"metadata":{"labels":{"a":{"deep":{"deeper":[1,2,3]}}}}}`,
		`[1,2,3]`,
		`"string"`,
	} {
		f.Add([]byte(fuzzOriginal), []byte(p))
	}
	for _, h := range hostileJSON {
		f.Add([]byte(fuzzOriginal), []byte(h))
		f.Add([]byte(h), []byte(`{"a":1}`))
	}
	f.Fuzz(func(t *testing.T, original, patch []byte) {
		if _, err := MergePatch(original, patch); err != nil && !errors.Is(err, ErrBadPatch) && !errors.Is(err, ErrPatchFailed) && !errors.Is(err, ErrPatchPanicked) {
			t.Fatalf("error %v wraps no sentinel", err)
		}
	})
}

func FuzzStrategicMergePatch(f *testing.F) {
	for _, p := range []string{
		`{"metadata":{"labels":{"c":"d"}}}`,
		`{"spec":{"containers":[{"name":"c","image":"j"}]}}`,
		`{"spec":{"containers":[{"name":"c","$patch":"delete"}]}}`,
		`{"spec":{"containers":[{"name":"d","image":"i"}],"$setElementOrder/containers":[{"name":"d"},{"name":"c"}]}}`,
		`{"spec":{"$patch":"replace","containers":[]}}`,
		`{"spec":{"$retainKeys":["containers"],"containers":[{"name":"c"}]}}`,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["x/y"]}}`,
		`{"metadata":{"finalizers":[{"$patch":"delete"}]}}`,
		`{"$patch":"delete"}`,
		`{"$patch":"bogus"}`,
		`{"spec":{"tolerations":[{"$patch":"merge"}]}}`,
		`{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"$patch":"delete"}]}]}}`,
		`{"spec":{"containers":{"name":"c"}}}`,
		`{"spec":{"containers":[1,"a",null]}}`,
		`{"spec":{"$setElementOrder/containers":"x"}}`,
	} {
		f.Add([]byte(fuzzOriginal), []byte(p))
	}
	for _, h := range hostileJSON {
		f.Add([]byte(fuzzOriginal), []byte(h))
	}
	f.Fuzz(func(t *testing.T, original, patch []byte) {
		if _, err := StrategicMergePatch(original, patch, &corev1.Pod{}); err != nil && !errors.Is(err, ErrBadPatch) && !errors.Is(err, ErrPatchFailed) && !errors.Is(err, ErrPatchPanicked) {
			t.Fatalf("error %v wraps no sentinel", err)
		}
	})
}

// FuzzApplyPatch feeds apply bodies (YAML or JSON) to their decoders and
// merges the ones that decode into a live ConfigMap with kube's
// FieldManager, as the api package does, and into one with managedFields,
// where NewFieldManager's must give kube's result; the User-Agent a write
// is recorded under is client bytes too.
func FuzzApplyPatch(f *testing.F) {
	for _, b := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\ndata:\n  a: \"1\"\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":{"a":"1"}}`,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: x\n  a: y\n",
		"a: &a [*a, *a]\n",
		"a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, managedFields: [{manager: x, operation: Apply}]}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nunknownField: 1\n",
		"apiVersion: v2\nkind: Nope\n",
		"!!binary gIGC\n",
		"--- \n- 1\n--- \na: 2\n",
		"? [a, b]\n: c\n",
		"a: 0x7fffffffffffffffffffff\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {a: !!float 1e400}\n",
	} {
		f.Add([]byte(b), "kubectl/v1.33.0 (linux/amd64)", false)
	}
	for _, h := range hostileJSON {
		f.Add([]byte(h), "\xff\xfe/x", true)
	}
	fm := fieldManager(f, "ConfigMap", "", nil)
	kube := kubeFieldManager(f, "ConfigMap", "", nil)
	alice, err := DecodeApplyPatch([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","labels":{"a":"b"}},"data":{"a":"1","b":"2"}}`))
	if err != nil {
		f.Fatal(err)
	}
	managedLive, err := kube.Apply(&api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", ResourceVersion: "1"}}, alice.Object, "alice", false)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, userAgent string, force bool) {
		m := ManagerOrUserAgent("", userAgent)
		if len(m) > metav1validation.FieldManagerMaxLength || !utf8.ValidString(m) || strings.ContainsFunc(m, func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Fatalf("manager %q from user agent %q", m, userAgent)
		}
		p, err := DecodeApplyPatch(body)
		if err != nil {
			if !errors.Is(err, ErrBadApplyPatch) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if err := p.CheckStrict(); err != nil && !errors.Is(err, ErrStrictApplyPatch) {
			t.Fatalf("strict error %v wraps no sentinel", err)
		}
		// The api package merges whatever decodes; errors are Status
		// errors or the FieldManager's own, a panic is a bug. The merge
		// into a live object with managedFields is kube's merge.
		live := &api.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", ResourceVersion: "1"},
			Data:       map[string]string{"a": "0"},
		}
		_, _ = fm.Apply(live, p.Object, "fuzz", force)
		p, _ = DecodeApplyPatch(body)
		kp, _ := DecodeApplyPatch(body)
		got, err := fm.Apply(managedLive.DeepCopyObject(), p.Object, "fuzz", force)
		want, wantErr := kube.Apply(managedLive.DeepCopyObject(), kp.Object, "fuzz", force)
		sameResult(t, "apply", got, want, err, wantErr)
	})
}
