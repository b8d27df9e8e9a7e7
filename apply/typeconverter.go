package apply

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v4/typed"
	"sigs.k8s.io/structured-merge-diff/v4/value"
)

// unstructuredFirst is a TypeConverter that gives the FieldManager a Go
// object (the live object, an update's new object) as the map
// structured-merge-diff itself makes of it, rather than as a reflected
// struct.
//
// The typed value of a reflected struct is walked by reflection every time
// it is read, and an apply reads the live object seven times or more
// (validation, merge, compare, field sets, pruning, equality, and a
// conversion back to a map only to learn its version): each walk marshals
// and unmarshals every field that has its own JSON form (managedFields'
// FieldsV1, every time stamp). Converted once to the map
// (value.NewValueReflect(obj).Unstructured(), which is what the reflected
// value stands for), the same walks read maps. The typed value is the same
// value either way; a conversion that fails takes kube's path, so that the
// error is kube's.
type unstructuredFirst struct {
	managedfields.TypeConverter
}

func (c unstructuredFirst) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if _, ok := obj.(*unstructured.Unstructured); !ok && hasManagedFields(obj) {
		if v, err := value.NewValueReflect(obj); err == nil {
			if m, ok := v.Unstructured().(map[string]interface{}); ok {
				if tv, err := c.TypeConverter.ObjectToTyped(&unstructured.Unstructured{Object: m}, opts...); err == nil {
					return tv, nil
				}
			}
		}
	}
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

func hasManagedFields(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && len(m.GetManagedFields()) > 0
}
