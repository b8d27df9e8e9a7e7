package registry

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apiextensions-apiserver/pkg/crdserverscheme"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/trustplane/trustplane/api/webhookclient"
	"github.com/trustplane/trustplane/apply"
)

// ErrNotServable is returned for a definition that cannot be served as it
// stands (no accepted names yet, a schema that is not structural); the
// definition's conditions say why, and it is served once they clear.
var ErrNotServable = errors.New("registry: the custom resource definition cannot be served")

// CustomResources returns the Resources that serve crd's custom objects,
// one per served version, built as kube's apiextensions server builds its
// storage for a definition: its accepted names, its structural schema for
// pruning and defaulting, apiextensions' own strategy (schema validation,
// x-kubernetes-validations, ratcheting, status and scale), its printer
// columns and its selectable fields. Every version stores its objects
// under the definition's group and spec plural, in the storage version;
// the definition's conversion (None, or its webhook) converts between
// them.
//
// The accepted names must be the spec's (acceptedNamesMatch): status is
// written by whoever may update customresourcedefinitions/status, so
// accepted names that differ from what the naming controller would accept
// could name another definition's resource (issue 28's red team). Until
// they match, the definition is not servable.
//
// static are the OpenAPI schemas of the built-in types a definition's
// schema refers to (ObjectMeta and what it references), from which, with
// the definition's own, server-side apply types its objects; without
// them, apply deduces types from the objects.
func CustomResources(crd *apiextensionsv1.CustomResourceDefinition, static map[string]*spec.Schema) ([]*Resource, error) {
	names := crd.Status.AcceptedNames
	if names.Plural == "" || names.Singular == "" || names.Kind == "" || names.ListKind == "" {
		return nil, fmt.Errorf("%w: %s has no accepted names", ErrNotServable, crd.Name)
	}
	if err := acceptedNamesMatch(crd); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotServable, crd.Name, err)
	}
	storageVersion, err := apihelpers.GetCRDStorageVersion(crd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotServable, err)
	}
	structurals := map[string]*structuralschema.Structural{}
	for _, v := range crd.Spec.Versions {
		s, err := structuralFor(crd, v.Name)
		if err != nil {
			return nil, err
		}
		if s != nil {
			structurals[v.Name] = s
		}
	}
	factory, err := converterFactory()
	if err != nil {
		return nil, err
	}
	safe, _, err := factory.NewConverter(crd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotServable, err)
	}
	tc, err := customTypeConverter(crd, static)
	if err != nil {
		return nil, err
	}
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: names.Kind}
	// The keys are the spec plural's, which the definition's name fixes
	// (plural.group, immutable and unique): no status write can point a
	// definition at another's objects.
	stored := schema.GroupVersionResource{Group: crd.Spec.Group, Version: storageVersion, Resource: crd.Spec.Names.Plural}
	typer := crdserverscheme.NewUnstructuredObjectTyper()
	namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped

	var out []*Resource
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		kind := gk.WithVersion(v.Name)
		validator, statusValidator, err := validatorsFor(crd, v.Name)
		if err != nil {
			return nil, err
		}
		status, scale, err := subresourcesFor(crd, v.Name)
		if err != nil {
			return nil, err
		}
		strategy := customresource.NewStrategy(typer, namespaced, kind, validator, statusValidator, structurals[v.Name], status, scale, v.SelectableFields)
		cols := v.AdditionalPrinterColumns
		if len(cols) == 0 {
			cols = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp",
				Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}}
		}
		table, err := tableconvertor.New(cols)
		if err != nil {
			// kube falls back to the default table for columns it cannot parse.
			table = rest.NewDefaultTableConvertor(stored.GroupResource())
		}
		codecs := newCustomCodecs(kind, safe, structurals, crd.Spec.PreserveUnknownFields)
		res := &Resource{
			GVR:          schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: names.Plural},
			KindName:     names.Kind,
			ListKindName: names.ListKind,
			Singular:     names.Singular,
			ShortNames:   names.ShortNames,
			Categories:   names.Categories,
			Namespaced:   namespaced,
			StoredAs:     stored,
			NewFunc: func() runtime.Object {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(kind)
				return u
			},
			NewListFunc: func() runtime.Object {
				l := &unstructured.UnstructuredList{}
				l.SetGroupVersionKind(gk.WithVersion(v.Name).GroupVersion().WithKind(names.ListKind))
				return l
			},
			CreateStrategy: strategy, UpdateStrategy: strategy, DeleteStrategy: strategy,
			GetAttrs:       strategy.GetAttrs,
			TableConvertor: table,
			Custom: &Custom{UID: crd.UID, Created: crd.CreationTimestamp, Codecs: codecs, Storage: codecs.storageCodec(stored.GroupVersion()),
				Terminating: apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating)},
		}
		if status != nil {
			res.Subresources = map[string]rest.RESTUpdateStrategy{"status": customresource.NewStatusStrategy(strategy)}
		}
		if scale != nil {
			res.Custom.Scale = &ScalePaths{SpecReplicasPath: scale.SpecReplicasPath, StatusReplicasPath: scale.StatusReplicasPath}
			if scale.LabelSelectorPath != nil {
				res.Custom.Scale.LabelSelectorPath = *scale.LabelSelectorPath
			}
		}
		if res.Custom.OpenAPIV3, err = builder.BuildOpenAPIV3(crd, v.Name, builder.Options{}); err != nil {
			return nil, fmt.Errorf("%w: openapi v3: %v", ErrNotServable, err)
		}
		if res.Custom.OpenAPIV2, err = builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true, IncludeSelectableFields: true}); err != nil {
			return nil, fmt.Errorf("%w: openapi v2: %v", ErrNotServable, err)
		}
		res.Custom.FieldManagers = map[string]*managedfields.FieldManager{}
		for sub, st := range map[string]any{"": strategy, "status": res.Subresources["status"]} {
			if st == nil {
				continue
			}
			fm, err := apply.NewCustomFieldManager(tc, codecs.Convertor(), codecs.defaulter, customCreator, kind, sub, st)
			if err != nil {
				return nil, fmt.Errorf("%w: field manager: %v", ErrNotServable, err)
			}
			res.Custom.FieldManagers[sub] = fm
		}
		out = append(out, res)
	}
	// Discovery lists versions by kube's version priority, the preferred first.
	sort.SliceStable(out, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(out[i].GVR.Version, out[j].GVR.Version) > 0
	})
	return out, nil
}

// converterFactory makes the definitions' converters; one per process,
// as kube's apiextensions server has. Its webhook clients resolve no
// Service and read answers up to conversionMaxResponse
// (api/webhookclient).
var converterFactory = sync.OnceValues(func() (*conversion.CRConverterFactory, error) {
	max := conversionMaxResponse.Load()
	if max <= 0 {
		max = webhookclient.DefaultMaxResponseBytes
	}
	return conversion.NewCRConverterFactory(webhookclient.Services{}, webhookclient.Limit(max))
})

// conversionMaxResponse is the largest answer a conversion webhook may
// give (SetConversionMaxResponseBytes); 0: webhookclient's default.
var conversionMaxResponse atomic.Int64

// SetConversionMaxResponseBytes sets the largest answer a conversion
// webhook may give, for every definition this process serves. It takes
// effect only before the first definition is served (the node's flags
// call it at start); an answer must hold the object it converts, so the
// limit should exceed the largest stored object.
func SetConversionMaxResponseBytes(max int64) { conversionMaxResponse.Store(max) }

// Custom is what a custom resource's Resource has that a built-in one
// takes from the scheme: its codecs, which decode requests into the served
// version (there is no internal version) with the schema's pruning and
// defaulting, and the codec of its stored objects.
type Custom struct {
	// UID is the definition's; a definition deleted and created again
	// under the same name is served anew.
	UID types.UID
	// Created is the definition's creation time: of two definitions
	// whose names conflict, the older is served (ServeCustom).
	Created metav1.Time
	// Terminating: the definition is being deleted; no new objects.
	Terminating bool
	Codecs      *CustomCodecs
	Storage     runtime.Codec
	// FieldManagers are the resource's and its status's ("status").
	FieldManagers map[string]*managedfields.FieldManager
	// Scale is the scale subresource's paths; nil when it has none.
	Scale *ScalePaths
	// OpenAPIV3 and OpenAPIV2 describe the version's paths and kinds, as
	// kube's apiextensions server publishes them.
	OpenAPIV3 *spec3.OpenAPI
	OpenAPIV2 *spec.Swagger
}

// customTypeConverter types crd's objects for server-side apply from its
// versions' schemas merged with static, as kube's apiextensions server
// does (buildOpenAPIModelsForApply); with no static schemas, from the
// objects themselves.
func customTypeConverter(crd *apiextensionsv1.CustomResourceDefinition, static map[string]*spec.Schema) (managedfields.TypeConverter, error) {
	if static == nil {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	specs := []*spec3.OpenAPI{{Version: "3.0.0", Info: &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes CRD Swagger", Version: "v0.1.0"}},
		Components: &spec3.Components{Schemas: static}}}
	for _, v := range crd.Spec.Versions {
		s, err := builder.BuildOpenAPIV3(crd, v.Name, builder.Options{})
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %v", ErrNotServable, crd.Name, v.Name, err)
		}
		specs = append(specs, s)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotServable, crd.Name, err)
	}
	return managedfields.NewTypeConverter(merged.Components.Schemas, crd.Spec.PreserveUnknownFields)
}

// structuralFor is version's structural schema with the defaults kube
// prunes, or nil when the version has none (preserveUnknownFields).
func structuralFor(crd *apiextensionsv1.CustomResourceDefinition, version string) (*structuralschema.Structural, error) {
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil || val == nil {
		return nil, err
	}
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		if crd.Spec.PreserveUnknownFields {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %s %s: %v", ErrNotServable, crd.Name, version, err)
	}
	if crd.Spec.PreserveUnknownFields {
		return s, nil
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v", ErrNotServable, crd.Name, version, err)
	}
	return s, nil
}

// validatorsFor are version's OpenAPI validators of the whole object and
// of its status alone (nil without a status subresource).
func validatorsFor(crd *apiextensionsv1.CustomResourceDefinition, version string) (whole, status apiservervalidation.SchemaValidator, err error) {
	val, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return nil, nil, err
	}
	var props *apiextensionsinternal.JSONSchemaProps
	if val != nil {
		internal := &apiextensionsinternal.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
			return nil, nil, err
		}
		props = internal.OpenAPIV3Schema
	}
	whole, _, err = apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, nil, err
	}
	subs, err := apihelpers.GetSubresourcesForVersion(crd, version)
	if err != nil {
		return nil, nil, err
	}
	if subs != nil && subs.Status != nil && props != nil && props.Properties != nil {
		if s, ok := props.Properties["status"]; ok {
			if status, _, err = apiservervalidation.NewSchemaValidator(&s); err != nil {
				return nil, nil, err
			}
		}
	}
	return whole, status, nil
}

// subresourcesFor are version's status and scale subresources in the
// internal types apiextensions' strategy takes.
func subresourcesFor(crd *apiextensionsv1.CustomResourceDefinition, version string) (*apiextensionsinternal.CustomResourceSubresourceStatus, *apiextensionsinternal.CustomResourceSubresourceScale, error) {
	subs, err := apihelpers.GetSubresourcesForVersion(crd, version)
	if err != nil || subs == nil {
		return nil, nil, err
	}
	var status *apiextensionsinternal.CustomResourceSubresourceStatus
	var scale *apiextensionsinternal.CustomResourceSubresourceScale
	if subs.Status != nil {
		status = &apiextensionsinternal.CustomResourceSubresourceStatus{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceStatus_To_apiextensions_CustomResourceSubresourceStatus(subs.Status, status, nil); err != nil {
			return nil, nil, err
		}
	}
	if subs.Scale != nil {
		scale = &apiextensionsinternal.CustomResourceSubresourceScale{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(subs.Scale, scale, nil); err != nil {
			return nil, nil, err
		}
	}
	return status, scale, nil
}

// ScalePaths are where a custom object keeps what its scale subresource
// shows: JSON paths (".spec.replicas") of the desired and current
// replicas and of the label selector.
type ScalePaths struct {
	SpecReplicasPath, StatusReplicasPath, LabelSelectorPath string
}

func splitPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }

// ScaleOf is cr's autoscaling/v1 Scale, as kube builds it: missing
// replicas are 0, and found reports whether the spec replicas were there.
func (p *ScalePaths) ScaleOf(cr *unstructured.Unstructured) (scale *autoscalingv1.Scale, found bool, err error) {
	spec, found, err := unstructured.NestedInt64(cr.Object, splitPath(p.SpecReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	status, _, err := unstructured.NestedInt64(cr.Object, splitPath(p.StatusReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	var selector string
	if p.LabelSelectorPath != "" {
		if selector, _, err = unstructured.NestedString(cr.Object, splitPath(p.LabelSelectorPath)...); err != nil {
			return nil, false, err
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{
			Name: cr.GetName(), Namespace: cr.GetNamespace(), UID: cr.GetUID(),
			ResourceVersion: cr.GetResourceVersion(), CreationTimestamp: cr.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(spec)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(status), Selector: selector},
	}, found, nil
}

// SetReplicas sets cr's spec replicas.
func (p *ScalePaths) SetReplicas(cr *unstructured.Unstructured, replicas int32) error {
	return unstructured.SetNestedField(cr.Object, int64(replicas), splitPath(p.SpecReplicasPath)...)
}

// acceptedNamesMatch checks that crd's accepted names are those of its
// spec, as the naming controller accepts them: the same plural, singular,
// kind and list kind, and short names and categories among the spec's (the
// controller may leave out a conflicting short name).
func acceptedNamesMatch(crd *apiextensionsv1.CustomResourceDefinition) error {
	a, s := crd.Status.AcceptedNames, crd.Spec.Names
	singular := s.Singular
	if singular == "" {
		singular = strings.ToLower(s.Kind)
	}
	listKind := s.ListKind
	if listKind == "" {
		listKind = s.Kind + "List"
	}
	switch {
	case a.Plural != s.Plural:
		return fmt.Errorf("status.acceptedNames.plural %q is not spec.names.plural %q", a.Plural, s.Plural)
	case a.Singular != singular:
		return fmt.Errorf("status.acceptedNames.singular %q is not spec.names.singular %q", a.Singular, singular)
	case a.Kind != s.Kind:
		return fmt.Errorf("status.acceptedNames.kind %q is not spec.names.kind %q", a.Kind, s.Kind)
	case a.ListKind != listKind:
		return fmt.Errorf("status.acceptedNames.listKind %q is not spec.names.listKind %q", a.ListKind, listKind)
	}
	for _, n := range a.ShortNames {
		if !slices.Contains(s.ShortNames, n) {
			return fmt.Errorf("status.acceptedNames.shortNames holds %q, which spec.names.shortNames does not", n)
		}
	}
	for _, c := range a.Categories {
		if !slices.Contains(s.Categories, c) {
			return fmt.Errorf("status.acceptedNames.categories holds %q, which spec.names.categories does not", c)
		}
	}
	return nil
}
