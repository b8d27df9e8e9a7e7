package registry

import (
	"encoding/json"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/fsm"
)

// WriteListJSON writes list exactly as the JSON serializer writes the
// external list (encoding/json plus a newline), splicing the cached JSON of
// each item instead of converting and encoding every object again. kvs are
// the stored versions of list's items, in order (ListVersions).
func (s *Store) WriteListJSON(w io.Writer, list runtime.Object, kvs []*fsm.KV) error {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	metaJSON, err := json.Marshal(metav1.ListMeta{
		ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount(),
	})
	if err != nil {
		return err
	}
	kind, _ := json.Marshal(s.KindName + "List")
	apiVersion, _ := json.Marshal(s.GVR.GroupVersion().String())
	items := make([][]byte, len(kvs))
	size := 64 + len(metaJSON)
	for i, kv := range kvs {
		if items[i], err = s.storage.ItemJSON(kv); err != nil {
			return err
		}
		size += len(items[i]) + 1
	}
	buf := make([]byte, 0, size)
	buf = append(buf, `{"kind":`...)
	buf = append(buf, kind...)
	buf = append(buf, `,"apiVersion":`...)
	buf = append(buf, apiVersion...)
	buf = append(buf, `,"metadata":`...)
	buf = append(buf, metaJSON...)
	buf = append(buf, `,"items":[`...)
	for i, item := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, item...)
	}
	buf = append(buf, "]}\n"...)
	_, err = w.Write(buf)
	return err
}
