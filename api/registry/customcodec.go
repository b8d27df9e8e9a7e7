package registry

import (
	"fmt"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/crdserverscheme"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
)

// CustomCodecs is the runtime.NegotiatedSerializer of one custom resource
// version, as kube's apiextensions server serves custom objects: JSON and
// YAML only (custom objects have no protobuf encoding), objects decoded
// into the served version (there is no internal one) and, on the way in,
// coerced to the definition's structural schema: unknown fields pruned
// (and reported under fieldValidation Strict or Warn), ObjectMeta checked,
// defaults applied.
type CustomCodecs struct {
	kind      schema.GroupVersionKind
	convertor runtime.ObjectConvertor
	coercer   schemaCoercer
	defaulter customDefaulter
	types     []runtime.SerializerInfo
}

var (
	customTyper   = crdserverscheme.NewUnstructuredObjectTyper()
	customCreator = unstructuredCreator{}
)

func newCustomCodecs(kind schema.GroupVersionKind, convertor runtime.ObjectConvertor, structurals map[string]*structuralschema.Structural, preserveUnknown bool) *CustomCodecs {
	c := &CustomCodecs{
		kind:      kind,
		convertor: convertor,
		coercer:   schemaCoercer{structurals: structurals, gk: kind.GroupKind(), preserveUnknown: preserveUnknown},
		defaulter: customDefaulter{structurals: structurals, gk: kind.GroupKind()},
	}
	plain := json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{})
	c.types = []runtime.SerializerInfo{{
		MediaType: runtime.ContentTypeJSON, MediaTypeType: "application", MediaTypeSubType: "json", EncodesAsText: true,
		Serializer:       plain,
		PrettySerializer: json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{Pretty: true}),
		StrictSerializer: json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{Strict: true}),
		StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: plain, Framer: json.Framer},
	}, {
		MediaType: runtime.ContentTypeYAML, MediaTypeType: "application", MediaTypeSubType: "yaml", EncodesAsText: true,
		Serializer:       json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{Yaml: true}),
		StrictSerializer: json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{Yaml: true, Strict: true}),
	}}
	return c
}

// SupportedMediaTypes are JSON and YAML.
func (c *CustomCodecs) SupportedMediaTypes() []runtime.SerializerInfo { return c.types }

// EncoderForVersion converts custom objects to gv (the definition's
// conversion) before encoding them.
func (c *CustomCodecs) EncoderForVersion(encoder runtime.Encoder, gv runtime.GroupVersioner) runtime.Encoder {
	return versioning.NewCodec(encoder, nil, c.convertor, customCreator, customTyper, nil, gv, nil, "customResourceEncoder")
}

// DecoderToVersion decodes, coerces to the schema and defaults. An
// unknown field is an error of the strict serializer, which the caller
// turns into a warning or a refusal per fieldValidation.
func (c *CustomCodecs) DecoderToVersion(decoder runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	coercer := c.coercer
	if s, ok := decoder.(*json.Serializer); ok {
		coercer.reportUnknown = s.IsStrict()
	}
	return versioning.NewCodec(nil, coercingDecoder{delegate: decoder, coercer: coercer}, c.convertor,
		customCreator, customTyper, c.defaulter, nil, gv, "customResourceDecoder")
}

// Convertor converts custom objects between the definition's versions.
func (c *CustomCodecs) Convertor() runtime.ObjectConvertor { return c.convertor }

// storageCodec encodes objects in the storage version and decodes stored
// ones, which may predate a schema change, dropping what is malformed in
// their metadata and pruning what the schema no longer has.
func (c *CustomCodecs) storageCodec(storageVersion schema.GroupVersion) runtime.Codec {
	plain := json.NewSerializerWithOptions(json.DefaultMetaFactory, customCreator, customTyper, json.SerializerOptions{})
	coercer := c.coercer
	coercer.dropInvalidMetadata, coercer.repairGeneration = true, true
	return versioning.NewCodec(plain, coercingDecoder{delegate: plain, coercer: coercer}, coercingConvertor{delegate: c.convertor, coercer: c.coercer},
		customCreator, customTyper, c.defaulter, storageVersion, c.kind.GroupVersion(), "customResourceStorage")
}

type unstructuredCreator struct{}

func (unstructuredCreator) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// customDefaulter applies the structural schema's defaults of the
// object's version.
type customDefaulter struct {
	structurals map[string]*structuralschema.Structural
	gk          schema.GroupKind
}

func (d customDefaulter) Default(in runtime.Object) {
	u, ok := in.(runtime.Unstructured)
	if !ok || u.GetObjectKind().GroupVersionKind().GroupKind() != d.gk {
		return
	}
	if s := d.structurals[u.GetObjectKind().GroupVersionKind().Version]; s != nil {
		structuraldefaulting.Default(u.UnstructuredContent(), s)
	}
}

// coercingDecoder decodes with its delegate, then coerces the object to
// the schema; the unknown fields it prunes are returned as a strict
// decoding error when the coercer reports them.
type coercingDecoder struct {
	delegate runtime.Decoder
	coercer  schemaCoercer
}

func (d coercingDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	var strictErrs []error
	obj, gvk, err := d.delegate.Decode(data, defaults, into)
	if err != nil {
		strict, ok := runtime.AsStrictDecodingError(err)
		if !ok || obj == nil {
			return nil, gvk, err
		}
		strictErrs = strict.Errors()
	}
	var unknown []string
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if unknown, err = d.coercer.apply(u); err != nil {
			return nil, gvk, err
		}
	}
	if d.coercer.reportUnknown && len(strictErrs)+len(unknown) > 0 {
		for _, path := range unknown {
			strictErrs = append(strictErrs, fmt.Errorf("unknown field %q", path))
		}
		return obj, gvk, runtime.NewStrictDecodingError(strictErrs)
	}
	return obj, gvk, nil
}

// coercingConvertor coerces what its delegate converts (a stored object
// read in another version).
type coercingConvertor struct {
	delegate runtime.ObjectConvertor
	coercer  schemaCoercer
}

func (c coercingConvertor) Convert(in, out, context interface{}) error {
	if err := c.delegate.Convert(in, out, context); err != nil {
		return err
	}
	if u, ok := out.(*unstructured.Unstructured); ok {
		if _, err := c.coercer.apply(u); err != nil {
			return err
		}
	}
	return nil
}

func (c coercingConvertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	out, err := c.delegate.ConvertToVersion(in, gv)
	if err != nil {
		return nil, err
	}
	if u, ok := out.(*unstructured.Unstructured); ok {
		if _, err := c.coercer.apply(u); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c coercingConvertor) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return c.delegate.ConvertFieldLabel(gvk, label, value)
}

// schemaCoercer does to a custom object what decoding into a Go struct
// does to a built-in one: ObjectMeta is checked (and, for stored objects,
// stripped of what is malformed), fields the structural schema does not
// have are pruned unless it preserves them, non-nullable nulls without a
// default are dropped, and embedded objects' metadata is coerced.
type schemaCoercer struct {
	structurals     map[string]*structuralschema.Structural
	gk              schema.GroupKind
	preserveUnknown bool

	dropInvalidMetadata bool
	repairGeneration    bool
	reportUnknown       bool
}

// apply coerces u in place and returns the paths of the unknown fields it
// pruned when reportUnknown is set.
func (c schemaCoercer) apply(u *unstructured.Unstructured) ([]string, error) {
	kind, foundKind, err := unstructured.NestedString(u.Object, "kind")
	if err != nil {
		return nil, err
	}
	apiVersion, foundAPIVersion, err := unstructured.NestedString(u.Object, "apiVersion")
	if err != nil {
		return nil, err
	}
	objectMeta, foundMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object, schemaobjectmeta.ObjectMetaOptions{
		DropMalformedFields: c.dropInvalidMetadata, ReturnUnknownFieldPaths: c.reportUnknown,
	})
	if err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	if gv.Group == c.gk.Group && kind == c.gk.Kind {
		s := c.structurals[gv.Version]
		if !c.preserveUnknown && s != nil {
			unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: c.reportUnknown})...)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, s)
		}
		ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, s, false, schemaobjectmeta.CoerceOptions{
			DropInvalidFields: c.dropInvalidMetadata, ReturnUnknownFieldPaths: c.reportUnknown,
		})
		if ferr != nil {
			return nil, ferr
		}
		unknown = append(unknown, paths...)
		// A stored value without metadata was not written by the store
		// (it always writes some): there is no generation to repair, and
		// objectMeta is nil (kube dereferences it; a corrupt or foreign
		// value must not panic the reader).
		if c.repairGeneration && foundMeta && objectMeta.Generation == 0 {
			objectMeta.Generation = 1
		}
	}
	// What pruning removed of the type and object metadata comes back.
	if foundKind {
		u.SetKind(kind)
	}
	if foundAPIVersion {
		u.SetAPIVersion(apiVersion)
	}
	if foundMeta {
		if err := schemaobjectmeta.SetObjectMeta(u.Object, objectMeta); err != nil {
			return nil, err
		}
	}
	return unknown, nil
}
