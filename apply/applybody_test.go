package apply

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// applyBodyEdges are bodies on either side of each exclusion of
// yamlReadsAsJSON, and JSON the YAML decoder reads differently or not at
// all; each was checked against sigs.k8s.io/yaml when the JSON path was
// written.
var applyBodyEdges = []string{
	`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a-0","namespace":"ns","labels":{"app":"bench"}},"data":{"n":"1","static":"v"}}`,
	`{"a":"\/"}`, `{"a":"\u002f"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud800"}`, `{"a":"\uDBFF"}`, `{"a":"\u00e9"}`, `{"a":"\u0000"}`,
	`{"a":"\b\f\n\r\t\"\\"}`, `{"a":"\\/"}`, `{"a":"\\"}`, `{"a":"\\u"}`,
	"\t{\"a\":1}", "{\t\"a\":\t1\t}", "{\"a\":1}\t", "{\"a\":1}\n\t", "{\"a\":1}\n ", "{\"a\":1}\r\n", " {\"a\":1}",
	"{\n\t\"a\": 1\n}", "{\"a\"\n:1}", "{\"a\":\n1}", `{ "a" : [ 1 , 2 ] , "b" : { } }`,
	"{\"a\":\"\x7f\"}", "{\"a\":\"\u0085\"}", "{\"a\":\"\u009f\"}", "{\"a\":\"\u00a0\"}", "{\"a\":\"\u2028\"}", "{\"a\":\"\u2029\"}",
	"{\"a\":\"\ufeff\"}", "\ufeff{\"a\":1}", "{\"a\":\"\uffff\"}", "{\"a\":\"\ufffd\"}", "{\"a\":\"\xff\"}", "{\"a\":\"é😀\"}",
	`{"<<":{"b":1}}`, `{"a":-0}`, `{"a":-0.0}`, `{"a":-0e0}`, `{"a":1e2}`, `{"a":1E+2}`, `{"a":1.0}`, `{"a":0.1}`, `{"a":1e400}`, `{"a":1e-400}`,
	`{"a":123456789012345678}`, `{"a":9007199254740993}`, `{"a":-9223372036854775808}`, `{"a":9223372036854775808}`, `{"a":12345678901234567890}`,
	`{"a":[]}`, `{"a":{}}`, `{}`, `{"a":null,"b":true,"c":false}`, `{"a":"#x"}`, `{"a":"&x *y !z %t @u"}`, `{"a":"---"}`, `{"a":"..."}`,
	`{"":1}`, `{"a":1}{"b":2}`, `{"a":1} #c`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `{"a":[{"b":1,"b":2}]}`, `{"a":"b"`, `{"a":}`, `{`, `{}}`,
	`{"` + strings.Repeat("k", 990) + `":1}`, `{"` + strings.Repeat("k", 1030) + `":1}`, `{"a":{"` + strings.Repeat("k", 1030) + `":1}}`,
	`{"` + strings.Repeat("k", 900) + `"` + strings.Repeat(" ", 200) + `:1}`, `{"a":"` + strings.Repeat("v", 5000) + `"}`,
	strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000), strings.Repeat(`{"a":[`, 3000) + "1" + strings.Repeat("]}", 3000),
	"kind: ConfigMap\napiVersion: v1\n", "{a: 1}", `{'a': 1}`, `{"a": 'b'}`, `{"a": b}`, `{"a": !!str 1}`, `{"a": &x 1, "b": *x}`,
}

// FuzzApplyPatchJSON: decoding an apply body gives what kube's decoding
// gives (k8s.io/apimachinery/pkg/util/yaml), whichever path the body takes: the same
// object, down to each number's Go type and sign, the same error, and the
// same strict error.
func FuzzApplyPatchJSON(f *testing.F) {
	for _, b := range applyBodyEdges {
		f.Add([]byte(b))
	}
	for _, h := range hostileJSON {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantErr := decodeYAMLApplyPatch(body)
		got, err := DecodeApplyPatch(body)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%q: error %v, kube's %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got.Object.Object, want.Object) {
			t.Fatalf("%q: decoded\n%#v\nkube's\n%#v", body, got.Object.Object, want.Object)
		}
		gotJSON, err1 := json.Marshal(got.Object.Object)
		wantJSON, err2 := json.Marshal(want.Object)
		if err1 != nil || err2 != nil || !bytes.Equal(gotJSON, wantJSON) {
			t.Fatalf("%q: decoded %s (%v), kube's %s (%v)", body, gotJSON, err1, wantJSON, err2)
		}
		strictErr, wantStrict := got.CheckStrict(), checkYAMLApplyPatchStrict(body)
		if (strictErr == nil) != (wantStrict == nil) || (strictErr != nil && strictErr.Error() != wantStrict.Error()) {
			t.Fatalf("%q: strict %v, kube's %v", body, strictErr, wantStrict)
		}
	})
}

// TestApplyPatchJSONPath: what client-go and kubectl send, compact JSON,
// is decoded once as JSON; what YAML reads otherwise is not.
func TestApplyPatchJSONPath(t *testing.T) {
	for _, tc := range []struct {
		body string
		json bool
	}{
		{`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","labels":{"app":"bench"}},"data":{"n":"1"}}`, true},
		{`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}]}}` + "\n", true},
		{`{"a": "b\n\"c\"\u00e9"}`, true},
		{"{\"a\":\"\u2028\"}", false},
		{`{"a":"\ud83d\ude00"}`, false},
		{"{\n  \"a\": 1\n}", false},
		{`{"a":1,"a":2}`, false},
		{"a: 1\n", false},
	} {
		if _, ok := decodeJSONApplyPatch([]byte(tc.body)); ok != tc.json {
			t.Errorf("%q: decoded as JSON %v, want %v", tc.body, ok, tc.json)
		}
	}
}
