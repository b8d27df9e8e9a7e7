package admission

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
)

// unstructuredAttributes hands validating plugins the request's objects as
// Unstructured objects of the request's kind, converted once, on first use.
//
// kube's ValidatingAdmissionPolicy plugin converts the object it admits to
// the policy's kind (admission.ConvertToGVK, which returns an object of
// that kind as it is) and then, for every policy it evaluates, into
// Unstructured for CEL (runtime.DefaultUnstructuredConverter, which takes
// an Unstructured's content without copying). With the typed object, ten
// matching policies convert a ConfigMap ten times, most of a create's
// CPU; with this, once. CEL sees the same values: both are the object's
// JSON form. Plugins only read the objects (validating admission), so
// sharing one conversion between them is safe.
//
// kube's audit wrapper (admission.WithAudit) reads a plugin's annotations
// back from the attributes through a method only kube's own record has, or
// through admission.AnnotationsGetter: each annotation is added to the
// record (which checks its key and refuses a changed value) and kept here
// for GetAnnotations.
type unstructuredAttributes struct {
	admission.Attributes
	convertor runtime.ObjectConvertor
	gvk       schema.GroupVersionKind
	obj, old  convertedObject

	mu          sync.Mutex
	annotations map[string]annotation
}

type annotation struct {
	value string
	level auditinternal.Level
}

// AddAnnotation adds an annotation at the Metadata level, as kube's record does.
func (a *unstructuredAttributes) AddAnnotation(key, value string) error {
	return a.AddAnnotationWithLevel(key, value, auditinternal.LevelMetadata)
}

// AddAnnotationWithLevel adds an annotation under the record's rules.
func (a *unstructuredAttributes) AddAnnotationWithLevel(key, value string, level auditinternal.Level) error {
	if err := a.Attributes.AddAnnotationWithLevel(key, value, level); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.annotations == nil {
		a.annotations = map[string]annotation{}
	}
	a.annotations[key] = annotation{value: value, level: level}
	return nil
}

// GetAnnotations is admission.AnnotationsGetter: the annotations added at
// maxLevel or below.
func (a *unstructuredAttributes) GetAnnotations(maxLevel auditinternal.Level) map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.annotations == nil {
		return nil
	}
	out := make(map[string]string, len(a.annotations))
	for k, v := range a.annotations {
		if !maxLevel.Less(v.level) {
			out[k] = v.value
		}
	}
	return out
}

func newUnstructuredAttributes(attrs admission.Attributes, convertor runtime.ObjectConvertor, gvk schema.GroupVersionKind) *unstructuredAttributes {
	return &unstructuredAttributes{Attributes: attrs, convertor: convertor, gvk: gvk}
}

// GetObject is the object as an Unstructured of the request's kind; if it
// cannot be converted, the object as it came (the plugin then converts it
// itself, and reports what goes wrong).
func (a *unstructuredAttributes) GetObject() runtime.Object {
	return a.converted(&a.obj, a.Attributes.GetObject())
}

// GetOldObject is GetObject for the old object.
func (a *unstructuredAttributes) GetOldObject() runtime.Object {
	return a.converted(&a.old, a.Attributes.GetOldObject())
}

// converted returns obj's conversion, made into *slot on first use.
func (a *unstructuredAttributes) converted(slot *convertedObject, obj runtime.Object) runtime.Object {
	if obj == nil {
		return nil
	}
	if !slot.done {
		slot.u, slot.err = a.convert(obj)
		slot.done = true
	}
	if slot.err != nil {
		return obj
	}
	return slot.u
}

// convertedObject is one object's conversion, once made.
type convertedObject struct {
	done bool
	u    *unstructured.Unstructured
	err  error
}

func (a *unstructuredAttributes) convert(obj runtime.Object) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == a.gvk {
		// A custom object is handled in its served version already.
		return u, nil
	}
	versioned, err := a.convertor.ConvertToVersion(obj, a.gvk.GroupVersion())
	if err != nil {
		return nil, err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(versioned)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(a.gvk)
	return u, nil
}
