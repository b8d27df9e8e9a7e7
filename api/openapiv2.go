package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	apiextensionsbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
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
//
// v2 is one document, as in kube: a change of the custom resources only
// hands the handler the per-version specs the definitions were built with
// (registry.CustomResources builds each once, when its definition
// changes), and the handler merges them on the next request that needs
// the document, as kube's apiextensions OpenAPI controller does with its
// per-definition spec caches. The handler then marshals and hashes the
// result once (kube-openapi's cached values), and serves it until the
// next change.
type openAPIV2 struct {
	http.Handler
	static  *spec.Swagger
	service *handler.OpenAPIService
	// mu serialises withCustom; specs are the custom specs it last
	// handed to the handler, gen counts its generations.
	mu    sync.Mutex
	specs []*spec.Swagger
	gen   uint64
	// lastGood is the last merge that succeeded, served in place of one
	// that fails.
	lastGood atomic.Pointer[mergedV2]
}

// mergedV2 is one merged document and its etag.
type mergedV2 struct {
	spec *spec.Swagger
	etag string
}

// withCustom serves the static document merged with the custom stores'
// definitions and paths, as kube's apiextensions server merges them, from
// the next request on; the merge is left to that request. When the specs
// are the ones served already, nothing changes.
func (o *openAPIV2) withCustom(stores []*registry.Store) {
	var specs []*spec.Swagger
	for _, st := range stores {
		if st.Custom != nil && st.Custom.OpenAPIV2 != nil {
			specs = append(specs, st.Custom.OpenAPIV2)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Equal(specs, o.specs) {
		return
	}
	o.specs = specs
	o.gen++
	// The generation is the merged spec's etag: the handler marshals the
	// spec anew when it changes.
	etag := "custom-" + strconv.FormatUint(o.gen, 10)
	o.service.UpdateSpecLazy(cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
		return o.merge(specs, etag)
	})))
}

// merge is the static document merged with specs. A merge that fails
// (kube's merge renames conflicting definitions, so it should not) leaves
// the last document that merged served, as the node served it before
// this change.
func (o *openAPIV2) merge(specs []*spec.Swagger, etag string) (*spec.Swagger, string, error) {
	merged, err := apiextensionsbuilder.MergeSpecs(o.static, specs...)
	if err != nil {
		if last := o.lastGood.Load(); last != nil {
			return last.spec, last.etag, nil
		}
		return nil, "", fmt.Errorf("openapi v2: %w", err)
	}
	o.lastGood.Store(&mergedV2{spec: merged, etag: etag})
	return merged, etag, nil
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
	o := &openAPIV2{Handler: h.handler, static: swagger, service: service}
	o.lastGood.Store(&mergedV2{spec: swagger, etag: "static"})
	return o, nil
}

// onePath receives the one handler kube-openapi registers.
type onePath struct{ handler http.Handler }

func (p *onePath) Handle(_ string, h http.Handler) { p.handler = h }
