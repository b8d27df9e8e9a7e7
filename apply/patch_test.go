package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// jsonEqual reports whether a and b are the same JSON value, whatever the
// key order and spacing.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb interface{}
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("not JSON: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("not JSON: %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// patchCase is one application of a patch: either want (the patched
// document) or wantErr (a sentinel the error must wrap) is set.
type patchCase struct {
	name     string
	original string
	patch    string
	want     string
	wantErr  error
}

func runPatchCases(t *testing.T, cases []patchCase, fn func(original, patch []byte) ([]byte, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fn([]byte(tc.original), []byte(tc.patch))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error = %v, want one wrapping %q (result %s)", err, tc.wantErr, got)
				}
				// The sentinels are distinct classes (400, 422, 413): an
				// error must never carry two of them.
				for _, other := range []error{ErrBadPatch, ErrPatchFailed, ErrTooManyOperations} {
					if other != tc.wantErr && errors.Is(err, other) {
						t.Fatalf("error %v wraps %q as well as %q", err, other, tc.wantErr)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !jsonEqual(t, got, []byte(tc.want)) {
				t.Fatalf("patched document:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestJSONPatch(t *testing.T) {
	const doc = `{"a":1,"b":{"c":"x"},"list":["p","q"]}`
	cases := []patchCase{
		{
			name:     "add sets a new member",
			original: doc,
			patch:    `[{"op":"add","path":"/d","value":true}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["p","q"],"d":true}`,
		},
		{
			name:     "add replaces an existing member",
			original: doc,
			patch:    `[{"op":"add","path":"/a","value":2}]`,
			want:     `{"a":2,"b":{"c":"x"},"list":["p","q"]}`,
		},
		{
			name:     "add with index inserts into an array",
			original: doc,
			patch:    `[{"op":"add","path":"/list/1","value":"n"}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["p","n","q"]}`,
		},
		{
			name:     "add with - appends to an array",
			original: doc,
			patch:    `[{"op":"add","path":"/list/-","value":"r"}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["p","q","r"]}`,
		},
		{
			name:     "add under a missing parent cannot be applied",
			original: doc,
			patch:    `[{"op":"add","path":"/missing/child","value":1}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "remove deletes a member",
			original: doc,
			patch:    `[{"op":"remove","path":"/b/c"}]`,
			want:     `{"a":1,"b":{},"list":["p","q"]}`,
		},
		{
			name:     "remove deletes an array element",
			original: doc,
			patch:    `[{"op":"remove","path":"/list/0"}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["q"]}`,
		},
		{
			name:     "remove of a missing path cannot be applied",
			original: doc,
			patch:    `[{"op":"remove","path":"/nope"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "replace changes an existing value",
			original: doc,
			patch:    `[{"op":"replace","path":"/b/c","value":"y"}]`,
			want:     `{"a":1,"b":{"c":"y"},"list":["p","q"]}`,
		},
		{
			// json-patch v4, which kube-apiserver uses, does not check that
			// an object member exists before replacing it.
			name:     "replace of a missing object member adds it, as kube-apiserver does",
			original: doc,
			patch:    `[{"op":"replace","path":"/nope","value":1}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["p","q"],"nope":1}`,
		},
		{
			name:     "replace of a missing array index cannot be applied",
			original: doc,
			patch:    `[{"op":"replace","path":"/list/5","value":"z"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "replace under a missing parent cannot be applied",
			original: doc,
			patch:    `[{"op":"replace","path":"/missing/child","value":1}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "move takes the value from one path to another",
			original: doc,
			patch:    `[{"op":"move","from":"/b/c","path":"/moved"}]`,
			want:     `{"a":1,"b":{},"list":["p","q"],"moved":"x"}`,
		},
		{
			name:     "move from a missing path cannot be applied",
			original: doc,
			patch:    `[{"op":"move","from":"/nope","path":"/moved"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "copy duplicates a value and keeps the source",
			original: doc,
			patch:    `[{"op":"copy","from":"/b","path":"/b2"}]`,
			want:     `{"a":1,"b":{"c":"x"},"b2":{"c":"x"},"list":["p","q"]}`,
		},
		{
			name:     "copy from under a missing parent cannot be applied",
			original: doc,
			patch:    `[{"op":"copy","from":"/missing/child","path":"/x"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "copy to under a missing parent cannot be applied",
			original: doc,
			patch:    `[{"op":"copy","from":"/a","path":"/missing/child"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "a passing test changes nothing and lets later operations run",
			original: doc,
			patch:    `[{"op":"test","path":"/b/c","value":"x"},{"op":"replace","path":"/a","value":3}]`,
			want:     `{"a":3,"b":{"c":"x"},"list":["p","q"]}`,
		},
		{
			name:     "a failing test fails the whole patch",
			original: doc,
			patch:    `[{"op":"replace","path":"/a","value":3},{"op":"test","path":"/b/c","value":"other"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "a test of a missing path fails",
			original: doc,
			patch:    `[{"op":"test","path":"/nope","value":1}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "operations apply in order",
			original: doc,
			patch:    `[{"op":"add","path":"/z","value":1},{"op":"replace","path":"/z","value":2},{"op":"copy","from":"/z","path":"/y"},{"op":"remove","path":"/z"}]`,
			want:     `{"a":1,"b":{"c":"x"},"list":["p","q"],"y":2}`,
		},
		{
			name:     "an empty patch changes nothing",
			original: doc,
			patch:    `[]`,
			want:     doc,
		},
		{
			name:     "an unknown op cannot be applied",
			original: doc,
			patch:    `[{"op":"frobnicate","path":"/a"}]`,
			wantErr:  ErrPatchFailed,
		},
		{
			name:     "a patch that is not JSON is a bad patch",
			original: doc,
			patch:    `[{"op":"add",`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a patch that is an object rather than an array is a bad patch",
			original: doc,
			patch:    `{"op":"add","path":"/a","value":1}`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a patch whose operations are not objects is a bad patch",
			original: doc,
			patch:    `[1,2]`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a string patch is a bad patch",
			original: doc,
			patch:    `"add"`,
			wantErr:  ErrBadPatch,
		},
	}
	runPatchCases(t, cases, JSONPatch)
}

// opsPatch builds a JSON patch of n operations that each pass.
func opsPatch(n int) string {
	ops := make([]string, n)
	for i := range ops {
		ops[i] = `{"op":"test","path":"/a","value":1}`
	}
	return "[" + strings.Join(ops, ",") + "]"
}

func TestJSONPatchOperationLimit(t *testing.T) {
	cases := []patchCase{
		{
			name:     "exactly MaxJSONPatchOperations operations are allowed",
			original: `{"a":1}`,
			patch:    opsPatch(MaxJSONPatchOperations),
			want:     `{"a":1}`,
		},
		{
			name:     "one operation over MaxJSONPatchOperations is too many",
			original: `{"a":1}`,
			patch:    opsPatch(MaxJSONPatchOperations + 1),
			wantErr:  ErrTooManyOperations,
		},
	}
	runPatchCases(t, cases, JSONPatch)

	t.Run("the too-many error names the limit and the count as kube-apiserver does", func(t *testing.T) {
		_, err := JSONPatch([]byte(`{"a":1}`), []byte(opsPatch(MaxJSONPatchOperations+1)))
		want := "The allowed maximum operations in a JSON patch is 10000, got 10001"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error = %v, want it to contain %q", err, want)
		}
	})
}

func TestMergePatch(t *testing.T) {
	const doc = `{"metadata":{"name":"x","labels":{"a":"1","b":"2"}},"list":[1,2,3],"keep":true}`
	cases := []patchCase{
		{
			name:     "null deletes a key",
			original: doc,
			patch:    `{"metadata":{"labels":{"a":null}}}`,
			want:     `{"metadata":{"name":"x","labels":{"b":"2"}},"list":[1,2,3],"keep":true}`,
		},
		{
			name:     "null deletes a whole object",
			original: doc,
			patch:    `{"metadata":{"labels":null}}`,
			want:     `{"metadata":{"name":"x"},"list":[1,2,3],"keep":true}`,
		},
		{
			name:     "null for a missing key changes nothing",
			original: doc,
			patch:    `{"nope":null}`,
			want:     doc,
		},
		{
			name:     "objects merge recursively",
			original: doc,
			patch:    `{"metadata":{"labels":{"c":"3","a":"9"}}}`,
			want:     `{"metadata":{"name":"x","labels":{"a":"9","b":"2","c":"3"}},"list":[1,2,3],"keep":true}`,
		},
		{
			name:     "arrays are replaced, never merged",
			original: doc,
			patch:    `{"list":[4]}`,
			want:     `{"metadata":{"name":"x","labels":{"a":"1","b":"2"}},"list":[4],"keep":true}`,
		},
		{
			name:     "a scalar replaces an object",
			original: doc,
			patch:    `{"metadata":{"labels":"flat"}}`,
			want:     `{"metadata":{"name":"x","labels":"flat"},"list":[1,2,3],"keep":true}`,
		},
		{
			name:     "an empty patch changes nothing",
			original: doc,
			patch:    `{}`,
			want:     doc,
		},
		{
			name:     "a patch that is not JSON is a bad patch",
			original: doc,
			patch:    `{"metadata":`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a patch that is JSON null is a bad patch",
			original: doc,
			patch:    `null`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a patch that is a JSON string is a bad patch",
			original: doc,
			patch:    `"x"`,
			wantErr:  ErrBadPatch,
		},
	}
	runPatchCases(t, cases, MergePatch)
}

func TestStrategicMergePatch(t *testing.T) {
	const sa = `{"apiVersion":"v1","kind":"ServiceAccount",` +
		`"metadata":{"name":"sa","namespace":"ns","labels":{"a":"1","b":"2"}},` +
		`"secrets":[{"name":"s1"},{"name":"s2"}],` +
		`"imagePullSecrets":[{"name":"p1"},{"name":"p2"}]}`
	// with returns sa with the given top-level fields replaced.
	with := func(fields string) string {
		var base, over map[string]interface{}
		if err := json.Unmarshal([]byte(sa), &base); err != nil {
			panic(err)
		}
		if err := json.Unmarshal([]byte(fields), &over); err != nil {
			panic(err)
		}
		for k, v := range over {
			if v == nil {
				delete(base, k)
				continue
			}
			base[k] = v
		}
		b, _ := json.Marshal(base)
		return string(b)
	}
	meta := func(labels string) string {
		return `{"metadata":{"name":"sa","namespace":"ns","labels":` + labels + `}}`
	}
	cases := []patchCase{
		{
			// Without $setElementOrder, strategicpatch puts patch-only
			// elements first, as kube-apiserver does.
			name:     "secrets merge by name: a new name is added and the others stay",
			original: sa,
			patch:    `{"secrets":[{"name":"s3"}]}`,
			want:     with(`{"secrets":[{"name":"s3"},{"name":"s1"},{"name":"s2"}]}`),
		},
		{
			name:     "secrets merge by name: an existing name is merged in place",
			original: sa,
			patch:    `{"secrets":[{"name":"s2","namespace":"other"}]}`,
			want:     with(`{"secrets":[{"name":"s1"},{"name":"s2","namespace":"other"}]}`),
		},
		{
			name:     "imagePullSecrets have no merge strategy and are replaced atomically",
			original: sa,
			patch:    `{"imagePullSecrets":[{"name":"p3"}]}`,
			want:     with(`{"imagePullSecrets":[{"name":"p3"}]}`),
		},
		{
			name:     "$patch delete removes the list element with that merge key",
			original: sa,
			patch:    `{"secrets":[{"$patch":"delete","name":"s1"}]}`,
			want:     with(`{"secrets":[{"name":"s2"}]}`),
		},
		{
			name:     "$patch delete of an absent merge key changes nothing",
			original: sa,
			patch:    `{"secrets":[{"$patch":"delete","name":"nope"}]}`,
			want:     sa,
		},
		{
			name:     "$patch replace in a merged list replaces the whole list",
			original: sa,
			patch:    `{"secrets":[{"$patch":"replace"},{"name":"s9"}]}`,
			want:     with(`{"secrets":[{"name":"s9"}]}`),
		},
		{
			name:     "$patch replace in a map replaces the whole map",
			original: sa,
			patch:    `{"metadata":{"labels":{"$patch":"replace","c":"3"}}}`,
			want:     with(meta(`{"c":"3"}`)),
		},
		{
			// The map is emptied; decoding into the typed object drops it.
			name:     "$patch delete in a map deletes every key of the map",
			original: sa,
			patch:    `{"metadata":{"labels":{"$patch":"delete"}}}`,
			want:     with(meta(`{}`)),
		},
		{
			name:     "$setElementOrder orders a merged list",
			original: sa,
			patch:    `{"$setElementOrder/secrets":[{"name":"s2"},{"name":"s3"},{"name":"s1"}],"secrets":[{"name":"s3"}]}`,
			want:     with(`{"secrets":[{"name":"s2"},{"name":"s3"},{"name":"s1"}]}`),
		},
		{
			name:     "null deletes a key",
			original: sa,
			patch:    `{"metadata":{"labels":{"a":null}}}`,
			want:     with(meta(`{"b":"2"}`)),
		},
		{
			name:     "maps merge recursively",
			original: sa,
			patch:    `{"metadata":{"labels":{"c":"3"}}}`,
			want:     with(meta(`{"a":"1","b":"2","c":"3"}`)),
		},
		{
			name:     "an empty patch changes nothing",
			original: sa,
			patch:    `{}`,
			want:     sa,
		},
		{
			// kube-apiserver decodes the patch into an empty map first, so
			// JSON null is an empty patch there too.
			name:     "a strategic patch that is JSON null changes nothing",
			original: sa,
			patch:    `null`,
			want:     sa,
		},
		{
			name:     "a strategic patch that is a JSON array is a bad patch",
			original: sa,
			patch:    `[{"secrets":[]}]`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a strategic patch that is a JSON string is a bad patch",
			original: sa,
			patch:    `"secrets"`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a strategic patch that is a JSON number is a bad patch",
			original: sa,
			patch:    `42`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a strategic patch that is not JSON is a bad patch",
			original: sa,
			patch:    `{"secrets":`,
			wantErr:  ErrBadPatch,
		},
		{
			name:     "a $retainKeys directive that is not a list is a bad patch",
			original: sa,
			patch:    `{"metadata":{"$retainKeys":"name"}}`,
			wantErr:  ErrBadPatch,
		},
	}
	runPatchCases(t, cases, func(original, patch []byte) ([]byte, error) {
		return StrategicMergePatch(original, patch, &corev1.ServiceAccount{})
	})
}

// doublingCopies is a JSON patch that copies /a into itself n times
// (/a/k0, /a/k1, ...): each copy doubles /a, so without a bound n copies
// grow it 2^n times.
func doublingCopies(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"op":"copy","from":"/a","path":"/a/k%d"}`, i)
	}
	b.WriteString("]")
	return b.String()
}

func TestJSONPatchCopiesAreBoundedByTheAccumulatedCopySize(t *testing.T) {
	SetJSONPatchMaxCopyBytes(3 << 20)
	bomb := fmt.Sprintf(`{"a":{"s":%q}}`, strings.Repeat("x", 1<<10))
	t.Run("copies below the bound apply", func(t *testing.T) {
		out, err := JSONPatch([]byte(`{"a":{"s":"x"}}`), []byte(doublingCopies(3)))
		if err != nil || strings.Count(string(out), `"s":"x"`) != 8 {
			t.Fatalf("out = %s, err = %v", out, err)
		}
	})
	t.Run("a doubling chain fails once it has copied more than the bound", func(t *testing.T) {
		_, err := JSONPatch([]byte(bomb), []byte(doublingCopies(64)))
		if !errors.Is(err, ErrPatchFailed) {
			t.Fatalf("err = %v, want ErrPatchFailed", err)
		}
		if want := "Unable to complete the copy, the accumulated size increase of copy is"; !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want json-patch's (and kube's) wording %q", err, want)
		}
	})
	t.Run("a later call never raises the bound", func(t *testing.T) {
		SetJSONPatchMaxCopyBytes(1 << 40)
		if _, err := JSONPatch([]byte(bomb), []byte(doublingCopies(64))); !errors.Is(err, ErrPatchFailed) {
			t.Fatalf("err = %v, want the 3 MiB bound to hold", err)
		}
	})
}

// doublingListCopies is a JSON patch that doubles /a with every operation by
// copying it into itself: n operations grow a 1 KiB value to 2^n KiB.
func doublingListCopies(n int) string {
	ops := []string{`{"op":"add","path":"/a","value":["` + strings.Repeat("x", 1024) + `"]}`}
	for i := 0; i < n; i++ {
		ops = append(ops, `{"op":"copy","from":"/a","path":"/a/-"}`)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// TestJSONPatchCopyLimit: copy operations may add at most
// MaxJSONPatchCopyBytes, kube-apiserver's default, so that a short patch
// cannot grow a document until the node runs out of memory (found by
// FuzzJSONPatch); past the limit the patch fails with a 422 as in kube.
func TestJSONPatchCopyLimit(t *testing.T) {
	if _, err := JSONPatch([]byte(`{}`), []byte(doublingListCopies(8))); err != nil {
		t.Fatalf("a patch copying 256 KiB in all: %v", err)
	}
	_, err := JSONPatch([]byte(`{}`), []byte(doublingListCopies(40)))
	if !errors.Is(err, ErrPatchFailed) || !strings.Contains(err.Error(), "exceeding the limit 3145728") {
		t.Fatalf("error = %v, want the copy limit as a failed patch", err)
	}
}

// TestPatchLibraryPanics: the patch libraries panic on some patches any
// client can send to any stored object (found by the fuzz targets); the
// patch functions answer ErrPatchPanicked, which the api package serves as
// a 500 as kube-apiserver's panic filter does, instead of unwinding the
// request.
func TestPatchLibraryPanics(t *testing.T) {
	for _, tc := range []struct{ original, patch string }{
		{`{"metadata":{"name":"a"}}`, `[{"op":"add","path":"/metadata/x","value":null},{"op":"add","path":"/metadata/x/y","value":1}]`},
		{`null`, `[{"op":"add","path":"/a","value":1}]`},
	} {
		if _, err := JSONPatch([]byte(tc.original), []byte(tc.patch)); !errors.Is(err, ErrPatchPanicked) {
			t.Errorf("JSONPatch(%s, %s) error = %v, want ErrPatchPanicked", tc.original, tc.patch, err)
		}
	}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`
	smp := `{"spec":{"$retainKeys":[{}],"containers":[]}}`
	if _, err := StrategicMergePatch([]byte(pod), []byte(smp), &corev1.Pod{}); !errors.Is(err, ErrPatchPanicked) {
		t.Errorf("StrategicMergePatch(%s) error = %v, want ErrPatchPanicked", smp, err)
	}
}
