package apply

import (
	"encoding/json"
	"strconv"
	"strings"

	kjson "sigs.k8s.io/json"
)

// UnknownFields decodes the patch strictly into into, a pointer to the
// kind's versioned Go type, and returns the paths of the fields that type
// does not declare ("spec.containers[0].bar"), in the decoder's order: the
// fields structured-merge-diff refuses to type. A value of the wrong type
// is err: the patch cannot be decoded at all.
func (p *ApplyPatch) UnknownFields(into any) ([]string, error) {
	data, err := json.Marshal(p.Object.Object)
	if err != nil {
		return nil, err
	}
	strictErrs, err := kjson.UnmarshalStrict(data, into)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range strictErrs {
		quoted, ok := strings.CutPrefix(e.Error(), "unknown field ")
		if !ok {
			continue
		}
		if path, err := strconv.Unquote(quoted); err == nil {
			paths = append(paths, path)
		}
	}
	return paths, nil
}

// PruneFields deletes the fields at paths (as UnknownFields names them)
// from the patch. It reports false when a path does not lead to a field,
// which happens when a name holds a dot or a bracket: the decoder's paths
// do not quote them, so the caller must refuse the patch rather than apply
// it with the field still in it.
func (p *ApplyPatch) PruneFields(paths []string) bool {
	for _, path := range paths {
		if !pruneField(p.Object.Object, path) {
			return false
		}
	}
	return true
}

// pruneField deletes the field at path ("a.b[2].c") from obj.
func pruneField(obj map[string]any, path string) bool {
	var cur any = obj
	for path != "" {
		var key string
		if path[0] == '[' {
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return false
			}
			i, err := strconv.Atoi(path[1:end])
			list, ok := cur.([]any)
			if err != nil || !ok || i < 0 || i >= len(list) {
				return false
			}
			cur, path = list[i], strings.TrimPrefix(path[end+1:], ".")
			continue
		}
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			key, path = path, ""
		} else {
			key, path = path[:end], strings.TrimPrefix(path[end:], ".")
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		v, ok := m[key]
		if !ok {
			return false
		}
		if path == "" {
			delete(m, key)
			return true
		}
		cur = v
	}
	return false
}
