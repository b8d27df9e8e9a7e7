package api

import (
	"fmt"
	apiextensionsbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"net/http"

	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/trustplane/trustplane/api/registry"
)

// OpenAPI v2.
//
// kubectl validates a manifest on the client (against /openapi/v2) when the
// v3 document gives its kind no PATCH operation taking fieldValidation: the
// reviews and TokenRequest, which only take POST. The v2 document therefore
// carries kube's schema definitions for every served kind (with their
// x-kubernetes-group-version-kind), which is what that validation reads. It
// lists no paths: every other v2 reader (kubectl explain, apply) uses v3.
// It is served in JSON and in kube's protobuf form by kube-openapi's handler.

// openAPIV2 is the v2 document of the built-in kinds and, merged into it,
// the custom resources served now (withCustom), behind kube-openapi's
// handler.
type openAPIV2 struct {
	http.Handler
	static  *spec.Swagger
	service *handler.OpenAPIService
}

// withCustom serves the static document merged with the custom stores'
// definitions and paths, as kube's apiextensions server merges them.
func (o *openAPIV2) withCustom(stores []*registry.Store) error {
	var specs []*spec.Swagger
	for _, st := range stores {
		if st.Custom != nil && st.Custom.OpenAPIV2 != nil {
			specs = append(specs, st.Custom.OpenAPIV2)
		}
	}
	merged, err := apiextensionsbuilder.MergeSpecs(o.static, specs...)
	if err != nil {
		return fmt.Errorf("openapi v2: %w", err)
	}
	o.service.UpdateSpec(merged)
	return nil
}

// newOpenAPIV2 builds the v2 handler for the served kinds.
func newOpenAPIV2(stores []*registry.Store, virtuals []*registry.Virtual) (*openAPIV2, error) {
	names := map[string]bool{}
	add := func(kinds ...string) {
		for _, k := range kinds {
			names[k] = true
		}
	}
	for _, st := range stores {
		obj, err := registry.Scheme.New(st.GVK())
		if err != nil {
			return nil, fmt.Errorf("openapi v2: %v is not in the scheme: %w", st.GVK(), err)
		}
		add(goTypeName(obj))
		if list, err := registry.Scheme.New(st.GVR.GroupVersion().WithKind(st.KindName + "List")); err == nil {
			add(goTypeName(list))
		}
	}
	for _, v := range virtuals {
		obj, err := registry.Scheme.New(v.Kind())
		if err != nil {
			return nil, fmt.Errorf("openapi v2: %v is not in the scheme: %w", v.Kind(), err)
		}
		add(goTypeName(obj))
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	swagger, err := builder.BuildOpenAPIDefinitionsForResources(&common.Config{
		Info:              &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: Version.GitVersion}},
		GetDefinitions:    generatedopenapi.GetOpenAPIDefinitions,
		GetDefinitionName: openAPINamer.GetDefinitionName,
	}, list...)
	if err != nil {
		return nil, fmt.Errorf("openapi v2: %w", err)
	}
	swagger.Paths = &spec.Paths{Paths: map[string]spec.PathItem{}}
	var h onePath
	service := handler.NewOpenAPIService(swagger)
	service.RegisterOpenAPIVersionedService("/openapi/v2", &h)
	return &openAPIV2{Handler: h.handler, static: swagger, service: service}, nil
}

// onePath receives the one handler kube-openapi registers.
type onePath struct{ handler http.Handler }

func (p *onePath) Handle(_ string, h http.Handler) { p.handler = h }
