package apply

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
)

// Sentinel errors of server-side apply; the api package maps them to
// Status codes.
var (
	// ErrBadApplyPatch: the apply body is not a YAML or JSON object (400).
	ErrBadApplyPatch = errors.New("error decoding YAML")
	// ErrStrictApplyPatch: the apply body repeats a field, and the request
	// asked for fieldValidation Strict or Warn (400 or a warning).
	ErrStrictApplyPatch = errors.New("error strict decoding YAML")
	// ErrTypeConverter: the OpenAPI schemas cannot be turned into the
	// structured-merge-diff schema (a build error, not a request error).
	ErrTypeConverter = errors.New("building the server-side apply schema")
)

// TypeConverterConfig says where the structured-merge-diff schema of the
// served kinds comes from: kube's generated OpenAPI definitions, named as the
// OpenAPI documents name them (their x-kubernetes-group-version-kind
// extension is what the converter finds a kind by).
type TypeConverterConfig struct {
	// Definitions are the generated OpenAPI definitions
	// (k8s.io/kubernetes/pkg/generated/openapi.GetOpenAPIDefinitions).
	Definitions common.GetOpenAPIDefinitions
	// DefinitionName names a Go type (package path, dot, type name) as the
	// OpenAPI documents do and returns its extensions.
	DefinitionName func(name string) (string, spec.Extensions)
	// TypeNames are the Go type names (package path, dot, type name) of the
	// served kinds; the schemas they reference are included.
	TypeNames []string
}

// NewTypeConverter builds the TypeConverter of the served kinds the way
// kube-apiserver does (GenericAPIServer.getOpenAPIModels): OpenAPI v3
// definitions for the resources, then managedfields.NewTypeConverter.
func NewTypeConverter(cfg TypeConverterConfig) (managedfields.TypeConverter, error) {
	schemas, err := Schemas(cfg)
	if err != nil {
		return nil, err
	}
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTypeConverter, err)
	}
	return tc, nil
}

// Schemas are the OpenAPI v3 schemas of cfg's types and of those they
// reference, by definition name.
func Schemas(cfg TypeConverterConfig) (map[string]*spec.Schema, error) {
	schemas, err := builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{
		Info:              &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes"}},
		GetDefinitions:    cfg.Definitions,
		GetDefinitionName: cfg.DefinitionName,
	}, cfg.TypeNames...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTypeConverter, err)
	}
	return schemas, nil
}

// NewCustomFieldManager builds kube's FieldManager for a custom resource
// (or its status) as kube's apiextensions server does
// (managedfields.NewDefaultCRDFieldManager): objects are handled in the
// served version kind, converted by the definition's convertor, and the
// strategy's reset fields are not owned by the writer.
func NewCustomFieldManager(tc managedfields.TypeConverter, convertor runtime.ObjectConvertor, defaulter runtime.ObjectDefaulter, creater runtime.ObjectCreater,
	kind schema.GroupVersionKind, subresource string, strategy any) (*managedfields.FieldManager, error) {
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if rs, ok := strategy.(rest.ResetFieldsStrategy); ok {
		reset = fieldpath.NewExcludeFilterSetMap(rs.GetResetFields())
	}
	return managedfields.NewDefaultCRDFieldManager(tc, convertor, defaulter, creater, kind, kind.GroupVersion(), subresource, reset)
}

// FieldManagerConfig describes one resource (or one subresource of it) for
// NewFieldManager.
type FieldManagerConfig struct {
	TypeConverter managedfields.TypeConverter
	// Scheme converts between the internal (hub) and external versions,
	// defaults and creates objects.
	Scheme *runtime.Scheme
	// Kind is the external kind served.
	Kind schema.GroupVersionKind
	// Subresource is "" for the resource itself, or "status", ...
	Subresource string
	// Strategy is the update strategy of the resource or subresource. When
	// it implements rest.ResetFieldsStrategy (or the filter form), the
	// fields it resets are not owned by the writer (a status write owns no
	// spec field, a main-resource write no status field).
	Strategy any
}

// NewFieldManager builds kube's default FieldManager for one resource or
// subresource, with the arguments kube-apiserver's installer passes: the
// unsafe object convertor of the scheme, the scheme as defaulter and
// creater, the internal version as hub, and the strategy's reset fields.
// The FieldManager keeps managedFields on updates, merges applies, moves
// client-side apply's last-applied annotation along with applies, and caps
// update managers at ten, all as kube-apiserver does. Its TypeConverter is
// cfg.TypeConverter behind unstructuredFirst, which changes how fast, not
// what, it computes.
func NewFieldManager(cfg FieldManagerConfig) (*managedfields.FieldManager, error) {
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	rs, isReset := cfg.Strategy.(rest.ResetFieldsStrategy)
	if isReset {
		reset = fieldpath.NewExcludeFilterSetMap(rs.GetResetFields())
	}
	if rf, ok := cfg.Strategy.(rest.ResetFieldsFilterStrategy); ok {
		if isReset {
			return nil, fmt.Errorf("%v: may not implement both ResetFieldsStrategy and ResetFieldsFilterStrategy", cfg.Kind)
		}
		reset = rf.GetResetFieldsFilter()
	}
	hub := schema.GroupVersion{Group: cfg.Kind.Group, Version: runtime.APIVersionInternal}
	return managedfields.NewDefaultFieldManager(unstructuredFirst{cfg.TypeConverter}, runtime.UnsafeObjectConvertor(cfg.Scheme),
		cfg.Scheme, cfg.Scheme, cfg.Kind, hub, cfg.Subresource, reset)
}

// ManagerOrUserAgent is the field manager a write is recorded under: the
// fieldManager the client named, or else the User-Agent up to its first
// "/", without unprintable characters and cut to the longest manager name
// allowed (kube's managerOrUserAgent).
func ManagerOrUserAgent(manager, userAgent string) string {
	if manager != "" {
		return manager
	}
	m, _, _ := strings.Cut(userAgent, "/")
	var buf bytes.Buffer
	for _, r := range m {
		if !unicode.IsPrint(r) {
			continue
		}
		if buf.Len()+utf8.RuneLen(r) > metav1validation.FieldManagerMaxLength {
			break
		}
		buf.WriteRune(r)
	}
	return buf.String()
}
