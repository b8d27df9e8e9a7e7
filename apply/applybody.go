package apply

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
)

// ApplyPatch is an apply body decoded once: the object the FieldManager
// merges, and what a strict decoding of the same body reports.
//
// kube's apply patcher decodes the body with sigs.k8s.io/yaml twice, once
// to decode it and once more, strictly, to find duplicate fields; both
// convert the YAML to JSON first. Clients (client-go's ApplyConfigurations,
// kubectl apply --server-side) send compact JSON, which is YAML too: such a
// body is decoded here once, by kube's JSON decoder, which finds duplicate
// fields in the same pass. Only a body the YAML decoder is known to read
// exactly as JSON takes that path (yamlReadsAsJSON); anything else, and any
// body the JSON decoder refuses or finds duplicates in, is decoded as kube
// decodes it, so the object, the errors and their wording are kube's.
type ApplyPatch struct {
	// Object is the decoded body, as kube's apply patcher decodes it
	// (k8s.io/apimachinery/pkg/util/yaml.Unmarshal into a map): integers
	// are int64, other numbers float64, so that a custom object's
	// integers stay integers.
	Object *unstructured.Unstructured
	body   []byte
	// noDuplicates: the JSON decoder found no duplicate field, so a strict
	// YAML decoding has nothing to report.
	noDuplicates bool
}

// DecodeApplyPatch decodes an apply body (YAML or JSON) into the
// unstructured object the FieldManager applies; an undecodable body is
// ErrBadApplyPatch.
func DecodeApplyPatch(body []byte) (*ApplyPatch, error) {
	if obj, ok := decodeJSONApplyPatch(body); ok {
		return &ApplyPatch{Object: obj, body: body, noDuplicates: true}, nil
	}
	obj, err := decodeYAMLApplyPatch(body)
	if err != nil {
		return nil, err
	}
	return &ApplyPatch{Object: obj, body: body}, nil
}

// CheckStrict reports what a strict decoding of the body finds (duplicate
// fields) as ErrStrictApplyPatch, as kube's apply patcher checks it.
func (p *ApplyPatch) CheckStrict() error {
	if p.noDuplicates {
		return nil
	}
	return checkYAMLApplyPatchStrict(p.body)
}

// decodeYAMLApplyPatch is kube's decoding of an apply body.
func decodeYAMLApplyPatch(body []byte) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: map[string]interface{}{}}
	if err := yaml.Unmarshal(body, &obj.Object); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadApplyPatch, err)
	}
	return obj, nil
}

// checkYAMLApplyPatchStrict is kube's strict check of an apply body.
func checkYAMLApplyPatchStrict(body []byte) error {
	if err := yaml.UnmarshalStrict(body, &map[string]interface{}{}); err != nil {
		return fmt.Errorf("%w: %v", ErrStrictApplyPatch, err)
	}
	return nil
}

// decodeJSONApplyPatch decodes body as JSON when the YAML decoder would
// read it as the same JSON and it has no duplicate field; ok is false
// otherwise, and the body must then be decoded as YAML.
func decodeJSONApplyPatch(body []byte) (_ *unstructured.Unstructured, ok bool) {
	if !yamlReadsAsJSON(body) {
		return nil, false
	}
	m := map[string]interface{}{}
	strict, err := kjson.UnmarshalStrict(body, &m, kjson.DisallowDuplicateFields)
	if err != nil || len(strict) > 0 {
		return nil, false
	}
	// The YAML path turns a JSON number into a YAML one and back: a float
	// that prints as an integer (1.0, 1e2) comes back an int64.
	yamlNumbers(m)
	return &unstructured.Unstructured{Object: m}, true
}

// yamlSimpleKeyBound bounds the distance in bytes from the opening quote of
// a key to its ':'. YAML (and so the YAML decoder) gives up on a key whose
// ':' is more than 1024 characters after its start.
const yamlSimpleKeyBound = 1000

// yamlReadsAsJSON reports whether body, if it is a JSON object, is read by
// the YAML decoder (sigs.k8s.io/yaml's go-yaml v2) as exactly that JSON.
// It is deliberately narrow: compact JSON on one line, as clients marshal
// it. Each exclusion is a case where YAML reads valid JSON differently or
// refuses it:
//   - a tab, CR or LF outside a string (YAML forbids a tab at the start of
//     a line, and a key and its ':' must be on one line); only spaces, CR
//     and LF may trail the closing brace;
//   - the escapes `\/` and `\u` of a UTF-16 surrogate (YAML knows neither);
//   - the characters YAML refuses or reads as line breaks: DEL, C1
//     controls (NEL among them), U+2028, U+2029, U+FEFF, U+FFFE, U+FFFF,
//     and invalid UTF-8 (JSON replaces it);
//   - a key more than yamlSimpleKeyBound bytes before its ':'.
//
// A body that passes may still be invalid JSON: the JSON decoder then
// refuses it and the body goes to the YAML decoder.
func yamlReadsAsJSON(body []byte) bool {
	end := len(body)
	for end > 0 && (body[end-1] == ' ' || body[end-1] == '\n' || body[end-1] == '\r') {
		end--
	}
	if end < 2 || body[0] != '{' || body[end-1] != '}' {
		return false
	}
	inString, keyStart := false, -1
	for i := 0; i < end; i++ {
		c := body[i]
		switch {
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(body[i:end])
			if (r == utf8.RuneError && size == 1) || r < 0xA0 || r == 0x2028 || r == 0x2029 || r == 0xFEFF || r == 0xFFFE || r == 0xFFFF {
				return false
			}
			i += size - 1
		case c == 0x7F, c == '\t', c == '\n', c == '\r':
			return false
		case inString:
			switch c {
			case '"':
				inString = false
			case '\\':
				if i+1 >= end {
					return false
				}
				switch body[i+1] {
				case '"', '\\', 'b', 'f', 'n', 'r', 't':
					i++
				case 'u':
					if i+3 >= end || isSurrogateEscape(body[i+2], body[i+3]) {
						return false
					}
					i++
				default:
					return false
				}
			}
		case c == '"':
			inString, keyStart = true, i
		case c == ':':
			if keyStart < 0 || i-keyStart > yamlSimpleKeyBound {
				return false
			}
		}
	}
	return !inString
}

// isSurrogateEscape reports whether the first two hex digits of a \u
// escape put it in D800-DFFF.
func isSurrogateEscape(h1, h2 byte) bool {
	if h1 != 'd' && h1 != 'D' {
		return false
	}
	switch h2 {
	case '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', 'A', 'B', 'C', 'D', 'E', 'F':
		return true
	}
	return false
}

// yamlNumbers turns every float64 in v that the YAML path would turn into
// an int64 into that int64, in place: sigs.k8s.io/yaml writes a float as
// strconv.FormatFloat(f, 'g', -1, 64) does, and kube's decoder reads what
// parses as an integer as an int64.
func yamlNumbers(v interface{}) {
	switch v := v.(type) {
	case map[string]interface{}:
		for k, e := range v {
			if f, ok := e.(float64); ok {
				v[k] = yamlNumber(f)
			} else {
				yamlNumbers(e)
			}
		}
	case []interface{}:
		for i, e := range v {
			if f, ok := e.(float64); ok {
				v[i] = yamlNumber(f)
			} else {
				yamlNumbers(e)
			}
		}
	}
}

func yamlNumber(f float64) interface{} {
	if n, err := strconv.ParseInt(strconv.FormatFloat(f, 'g', -1, 64), 10, 64); err == nil {
		return n
	}
	return f
}
