package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// scaleKind is the kind of every scale subresource served (a custom
// resource's), as kube-apiserver serves them.
var scaleKind = schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}

// EquivalentResourcesFor lists the served versions of resource's group
// resource that serve subresource (kube's runtime.EquivalentResourceMapper,
// which admission's matchPolicy Equivalent asks), built-in ones in
// registration order, then custom ones.
func (r *Registry) EquivalentResourcesFor(resource schema.GroupVersionResource, subresource string) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, s := range r.Stores() {
		if s.GVR.GroupResource() == resource.GroupResource() && !s.kindOf(subresource).Empty() {
			out = append(out, s.GVR)
		}
	}
	return out
}

// KindFor is the kind that resource's subresource takes, or the empty kind
// when it is not served.
func (r *Registry) KindFor(resource schema.GroupVersionResource, subresource string) schema.GroupVersionKind {
	if s := r.Store(resource); s != nil {
		return s.kindOf(subresource)
	}
	return schema.GroupVersionKind{}
}

// kindOf is the kind the subresource sub ("" for the resource) takes, or
// the empty kind when the store does not serve it.
func (s *Store) kindOf(sub string) schema.GroupVersionKind {
	switch {
	case sub == "":
		return s.GVK()
	case sub == "scale" && s.Custom != nil && s.Custom.Scale != nil:
		return scaleKind
	case s.Subresources[sub] != nil:
		return s.GVK()
	}
	return schema.GroupVersionKind{}
}

// ConvertorOf returns the convertor of the custom resource of kind gk,
// which converts its objects between the definition's versions, or nil
// when none is served.
func (r *Registry) ConvertorOf(gk schema.GroupKind) runtime.ObjectConvertor {
	for _, s := range r.custom.all() {
		if s.Custom != nil && s.Kind() == gk {
			return s.Convertor()
		}
	}
	return nil
}
