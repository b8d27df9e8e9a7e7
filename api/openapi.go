package api

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/trustplane/trustplane/api/registry"
)

// OpenAPI v3.
//
// kubectl reads /openapi/v3 before it sends a create, replace or apply with
// its default --validate=strict: when the PATCH operation of the object's
// kind lists the fieldValidation query parameter, it leaves validation to the
// server (which it then asks for with fieldValidation=Strict); otherwise it
// falls back to client-side validation against /openapi/v2, and fails when
// that is absent. kubectl explain reads the schemas, and kubectl apply the
// patch strategies in them. These documents therefore describe every served
// path with its operations (kube's x-kubernetes-action and
// x-kubernetes-group-version-kind extensions, query parameters, bodies and
// answers) and kube's own generated schemas for the types involved. The
// operations are built from the registry rather than from routes, so they are
// leaner than kube-apiserver's (no watch paths, one answer per operation).
// /openapi/v2 carries schema definitions only (openapiv2.go).

// openAPIDoc is an OpenAPI 3.0 document as far as it is filled here.
type openAPIDoc struct {
	OpenAPI string                             `json:"openapi"`
	Info    map[string]string                  `json:"info"`
	Paths   map[string]map[string]any          `json:"paths"`
	Comps   map[string]map[string]*spec.Schema `json:"components"`
	names   map[string]bool                    // Go type names whose schemas are included
}

// openAPIParam is one operation parameter.
type openAPIParam struct {
	Name        string `json:"name"`
	In          string `json:"in"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	// Schema carries uniqueItems, where OpenAPI v3 puts it (kube-openapi's
	// builder3; v2 has it on the parameter).
	Schema map[string]any `json:"schema"`
}

func queryParam(name, typ, desc string) openAPIParam {
	return openAPIParam{Name: name, In: "query", Description: desc, Schema: map[string]any{"type": typ, "uniqueItems": true}}
}

func pathParam(name, desc string) openAPIParam {
	return openAPIParam{Name: name, In: "path", Description: desc, Required: true, Schema: map[string]any{"type": "string", "uniqueItems": true}}
}

// The query parameters of kube-apiserver's operations.
var (
	paramPretty          = queryParam("pretty", "string", "If 'true', then the output is pretty printed.")
	paramDryRun          = queryParam("dryRun", "string", "When present, indicates that modifications should not be persisted.")
	paramFieldManager    = queryParam("fieldManager", "string", "fieldManager is a name associated with the actor or entity that is making these changes.")
	paramFieldValidation = queryParam("fieldValidation", "string", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (the default) and Strict.")
	paramForce           = queryParam("force", "boolean", "Force is going to \"force\" Apply requests.")
	paramGrace           = queryParam("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted.")
	paramOrphan          = queryParam("orphanDependents", "boolean", "Deprecated: please use the PropagationPolicy.")
	paramPropagation     = queryParam("propagationPolicy", "string", "Whether and how garbage collection will be performed.")
	listParams           = []openAPIParam{
		queryParam("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
		queryParam("continue", "string", "The continue option should be set when retrieving more results from the server."),
		queryParam("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
		queryParam("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
		queryParam("limit", "integer", "limit is a maximum number of responses to return for a list call."),
		queryParam("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request may be served from."),
		queryParam("resourceVersionMatch", "string", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
		queryParam("sendInitialEvents", "boolean", "`sendInitialEvents=true` may be set together with `watch=true`."),
		queryParam("timeoutSeconds", "integer", "Timeout for the list/watch call."),
		queryParam("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
	}
)

// Media types of request and response bodies, as kube-apiserver lists them.
var (
	bodyTypes   = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	patchTypes3 = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)}
)

// content maps each media type to a schema reference.
func content(ref string, mediaTypes []string) map[string]any {
	if ref == "" {
		return nil
	}
	c := map[string]any{}
	for _, mt := range mediaTypes {
		c[mt] = map[string]any{"schema": map[string]string{"$ref": "#/components/schemas/" + ref}}
	}
	return c
}

// operation is one operation: out names the schema of its answer (with
// HTTP code code), in the schema of its request body ("" for none).
func operation(id, action string, gvk schema.GroupVersionKind, code, out, in string, inTypes []string, params ...openAPIParam) map[string]any {
	op := map[string]any{
		"operationId": id,
		"responses": map[string]any{
			code:  response(out),
			"401": map[string]string{"description": "Unauthorized"},
		},
		"x-kubernetes-action":             action,
		"x-kubernetes-group-version-kind": map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
	}
	// No operation parameters: no key, as kube-openapi marshals an empty
	// list (omitempty), so that the document round-trips through its types.
	if len(params) > 0 {
		op["parameters"] = params
	}
	if in != "" {
		op["requestBody"] = map[string]any{"required": true, "content": content(in, inTypes)}
	}
	return op
}

// response is an answer with the schema out ("" for none).
func response(out string) map[string]any {
	r := map[string]any{"description": "OK"}
	if c := content(out, bodyTypes); c != nil {
		r["content"] = c
	}
	return r
}

// goTypeName is the name kube's generated OpenAPI definitions use for the
// Go type of obj: its package path, a dot, its type name.
func goTypeName(obj any) string {
	t := reflect.TypeOf(obj)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() + "." + t.Name()
}

// openAPINamer names definitions as kube-apiserver does
// (io.k8s.api.core.v1.Pod), with their x-kubernetes-group-version-kind.
var openAPINamer = openapinamer.NewDefinitionNamer(registry.Scheme)

// schemaName is the OpenAPI name of the Go type of obj.
func schemaName(obj any) string {
	name, _ := openAPINamer.GetDefinitionName(goTypeName(obj))
	return name
}

// openAPIPathPrefix is where gv's paths live: api/v1 or apis/<group>/<version>.
func openAPIPathPrefix(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// operationGroup is the group and version part of kube's operation IDs
// (CoreV1, CertificatesV1, AuthenticationV1beta1).
func operationGroup(gv schema.GroupVersion) string {
	id := strings.ToUpper(gv.Version[:1]) + gv.Version[1:]
	if gv.Group == "" {
		return "CoreV1"
	}
	parts := strings.Split(gv.Group, ".")
	return strings.ToUpper(parts[0][:1]) + parts[0][1:] + id
}

// openAPIV3Docs builds one document per served group version, keyed by its
// path prefix, with kube-apiserver's operation names and actions.
func openAPIV3Docs(stores []*registry.Store, virtuals []*registry.Virtual) (map[string][]byte, error) {
	docs := map[string]*openAPIDoc{}
	docFor := func(gv schema.GroupVersion) *openAPIDoc {
		prefix := openAPIPathPrefix(gv)
		doc := docs[prefix]
		if doc == nil {
			doc = &openAPIDoc{
				OpenAPI: "3.0.0",
				Info:    map[string]string{"title": "Kubernetes", "version": Version.GitVersion},
				Paths:   map[string]map[string]any{},
				Comps:   map[string]map[string]*spec.Schema{},
				names: map[string]bool{
					goTypeName(&metav1.Status{}): true, goTypeName(&metav1.Patch{}): true, goTypeName(&metav1.DeleteOptions{}): true,
				},
			}
			docs[prefix] = doc
		}
		return doc
	}
	for _, v := range virtuals {
		// A review or TokenRequest: one POST operation, kube's "create".
		gv, gvk := v.GVR.GroupVersion(), v.Kind()
		doc := docFor(gv)
		obj, err := registry.Scheme.New(gvk)
		if err != nil {
			return nil, fmt.Errorf("openapi: %v is not in the scheme: %w", gvk, err)
		}
		doc.names[goTypeName(obj)] = true
		path, scope := "/"+openAPIPathPrefix(gv)+"/", ""
		params := []openAPIParam{paramPretty}
		if v.Namespaced {
			path += "namespaces/{namespace}/"
			scope = "Namespaced"
			params = append(params, pathParam("namespace", "object name and auth scope, such as for teams and projects"))
		}
		path += v.GVR.Resource
		if v.Subresource != "" {
			path += "/{name}/" + v.Subresource
			params = append(params, pathParam("name", "name of the "+gvk.Kind))
		}
		one := schemaName(obj)
		doc.Paths[path] = map[string]any{
			"parameters": params,
			"post":       operation("create"+operationGroup(gv)+scope+gvk.Kind, "post", gvk, "201", one, one, bodyTypes, paramDryRun, paramFieldManager, paramFieldValidation),
		}
	}
	for _, st := range stores {
		gv := st.GVR.GroupVersion()
		prefix := openAPIPathPrefix(gv)
		doc := docFor(gv)
		gvk := st.GVK()
		id := operationGroup(gv)
		base := "/" + prefix + "/"
		scope := ""
		collectionParams := []openAPIParam{paramPretty}
		itemParams := []openAPIParam{pathParam("name", "name of the "+st.KindName), paramPretty}
		if st.Namespaced {
			base += "namespaces/{namespace}/"
			scope = "Namespaced"
			ns := pathParam("namespace", "object name and auth scope, such as for teams and projects")
			collectionParams = append(collectionParams, ns)
			itemParams = append(itemParams, ns)
		}
		obj, err := registry.Scheme.New(gvk)
		if err != nil {
			return nil, fmt.Errorf("openapi: %v is not in the scheme: %w", gvk, err)
		}
		doc.names[goTypeName(obj)] = true
		one, list := schemaName(obj), ""
		// Create-only kinds (reviews) have no list kind.
		if listObj, err := registry.Scheme.New(gv.WithKind(gvk.Kind + "List")); err == nil {
			doc.names[goTypeName(listObj)] = true
			list = schemaName(listObj)
		}
		status, patch, delOpts := schemaName(&metav1.Status{}), schemaName(&metav1.Patch{}), schemaName(&metav1.DeleteOptions{})
		verbs := map[string]bool{}
		for _, v := range st.Verbs() {
			verbs[v] = true
		}
		collection := map[string]any{"parameters": collectionParams}
		item := map[string]any{"parameters": itemParams}
		kind := st.KindName
		if verbs["list"] {
			collection["get"] = operation("list"+id+scope+kind, "list", gvk, "200", list, "", nil, listParams...)
		}
		if verbs["create"] {
			collection["post"] = operation("create"+id+scope+kind, "post", gvk, "201", one, one, bodyTypes, paramDryRun, paramFieldManager, paramFieldValidation)
		}
		if verbs["deletecollection"] {
			collection["delete"] = operation("deletecollection"+id+scope+kind, "deletecollection", gvk, "200", status, delOpts, bodyTypes,
				append([]openAPIParam{paramDryRun, paramGrace, paramOrphan, paramPropagation}, listParams...)...)
		}
		if verbs["get"] {
			item["get"] = operation("read"+id+scope+kind, "get", gvk, "200", one, "", nil)
		}
		if verbs["update"] {
			item["put"] = operation("replace"+id+scope+kind, "put", gvk, "200", one, one, bodyTypes, paramDryRun, paramFieldManager, paramFieldValidation)
		}
		if verbs["patch"] {
			item["patch"] = operation("patch"+id+scope+kind, "patch", gvk, "200", one, patch, patchTypes3, paramDryRun, paramFieldManager, paramFieldValidation, paramForce)
		}
		if verbs["delete"] {
			item["delete"] = operation("delete"+id+scope+kind, "delete", gvk, "200", one, delOpts, bodyTypes, paramDryRun, paramGrace, paramOrphan, paramPropagation)
		}
		doc.Paths[base+st.GVR.Resource] = collection
		doc.Paths[base+st.GVR.Resource+"/{name}"] = item
		if st.Namespaced && verbs["list"] {
			doc.Paths["/"+prefix+"/"+st.GVR.Resource] = map[string]any{
				"parameters": []openAPIParam{paramPretty},
				"get":        operation("list"+id+kind+"ForAllNamespaces", "list", gvk, "200", list, "", nil, listParams...),
			}
		}
	}
	out := map[string][]byte{}
	for prefix, doc := range docs {
		names := make([]string, 0, len(doc.names))
		for n := range doc.names {
			names = append(names, n)
		}
		schemas, err := builder3.BuildOpenAPIDefinitionsForResources(&common.OpenAPIV3Config{
			Info:              &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: Version.GitVersion}},
			GetDefinitions:    generatedopenapi.GetOpenAPIDefinitions,
			GetDefinitionName: openAPINamer.GetDefinitionName,
		}, names...)
		if err != nil {
			return nil, fmt.Errorf("openapi: building schemas for %s: %w", prefix, err)
		}
		doc.Comps["schemas"] = schemas
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", prefix, err)
		}
		out[prefix] = b
	}
	return out, nil
}

// openAPIV3 holds the documents and the discovery index pointing at them:
// the built-in kinds' documents, fixed at the start, and with them one per
// group version of the custom resources served now (withCustom).
//
// A change of the custom resources costs only the group versions it
// touches, and nothing until the next request, as kube's apiextensions
// OpenAPI v3 controller updates one group version lazily: a group version
// whose definitions' specs are the ones it was built from keeps its
// document (and so its hash and the clients' caches); a changed one gets a
// new document that is merged and marshalled on its first read, by a GET
// of it or of the index (which names each document by its hash).
type openAPIV3 struct {
	static map[string]*v3Doc
	// mu serialises withCustom; custom is what it last served, per path
	// prefix of a custom group version.
	mu      sync.Mutex
	custom  map[string]*v3Doc
	current atomic.Pointer[openAPIV3Set]
}

// openAPIV3Set is one generation of the documents, by path prefix, and of
// their index, which is built on its first read.
type openAPIV3Set struct {
	docs      map[string]*v3Doc
	indexOnce sync.Once
	index     []byte
}

// v3Doc is one group version's document, built once, on first use, from
// the specs it names (nil for a built-in document, built at the start).
type v3Doc struct {
	specs []*spec3.OpenAPI
	once  sync.Once
	body  []byte
	hash  string // kube's: upper-case hex SHA-512 of body
	err   error
}

// builtDoc is a document already built.
func builtDoc(body []byte) *v3Doc {
	d := &v3Doc{body: body, hash: docHash(body)}
	d.once.Do(func() {})
	return d
}

// customDoc is the document merging specs, as kube's apiextensions server
// publishes a group version of custom resources; it is built on first use.
func customDoc(specs []*spec3.OpenAPI) *v3Doc { return &v3Doc{specs: specs} }

// get builds the document on the first call and returns it with its hash;
// a document that cannot be built is an error each time (kube logs and
// leaves out a definition it cannot describe).
func (d *v3Doc) get() ([]byte, string, error) {
	d.once.Do(func() {
		merged, err := apiextensionsbuilder.MergeSpecsV3(d.specs...)
		if err == nil {
			d.body, err = json.Marshal(merged)
		}
		if err != nil {
			d.err = err
			return
		}
		d.hash = docHash(d.body)
	})
	return d.body, d.hash, d.err
}

// sameSpecs says whether d was built from exactly specs (the same
// pointers: a definition served anew has new specs).
func (d *v3Doc) sameSpecs(specs []*spec3.OpenAPI) bool {
	return slices.Equal(d.specs, specs)
}

func docHash(b []byte) string {
	sum := sha512.Sum512(b)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

func newOpenAPIV3(stores []*registry.Store, virtuals []*registry.Virtual) (*openAPIV3, error) {
	docs, err := openAPIV3Docs(stores, virtuals)
	if err != nil {
		return nil, err
	}
	o := &openAPIV3{static: make(map[string]*v3Doc, len(docs)), custom: map[string]*v3Doc{}}
	for prefix, b := range docs {
		o.static[prefix] = builtDoc(b)
	}
	o.current.Store(&openAPIV3Set{docs: o.static})
	return o, nil
}

// getIndex is the discovery index naming each document with its hash,
// built on the first call; it builds the documents not built yet, and
// leaves out those that cannot be.
func (set *openAPIV3Set) getIndex() []byte {
	set.indexOnce.Do(func() {
		type pathInfo struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		}
		paths := make(map[string]pathInfo, len(set.docs))
		for prefix, d := range set.docs {
			if _, hash, err := d.get(); err == nil {
				paths[prefix] = pathInfo{ServerRelativeURL: "/openapi/v3/" + prefix + "?hash=" + hash}
			}
		}
		set.index, _ = json.Marshal(map[string]any{"paths": paths}) // map keys marshal sorted
	})
	return set.index
}

// withCustom serves the built-in documents and one per group version of
// the custom stores, each merging the specs of the definitions served in
// it. A group version a built-in kind has keeps the built-in document.
// Only group versions whose specs changed get a new (lazy) document; when
// none did, the served generation stays as it is.
func (o *openAPIV3) withCustom(stores []*registry.Store) {
	byGV := customSpecsV3(stores)
	o.mu.Lock()
	defer o.mu.Unlock()
	next := make(map[string]*v3Doc, len(byGV))
	changed := len(byGV) != len(o.custom)
	for prefix, specs := range byGV {
		if _, builtin := o.static[prefix]; builtin {
			continue
		}
		d := o.custom[prefix]
		if d == nil || !d.sameSpecs(specs) {
			d, changed = customDoc(specs), true
		}
		next[prefix] = d
	}
	if !changed {
		return
	}
	docs := make(map[string]*v3Doc, len(o.static)+len(next))
	maps.Copy(docs, o.static)
	maps.Copy(docs, next)
	o.custom = next
	o.current.Store(&openAPIV3Set{docs: docs})
}

// customSpecsV3 are the OpenAPI v3 specs of the custom stores, by the path
// prefix of their group version, in the stores' order.
func customSpecsV3(stores []*registry.Store) map[string][]*spec3.OpenAPI {
	byGV := map[string][]*spec3.OpenAPI{}
	for _, st := range stores {
		if st.Custom == nil || st.Custom.OpenAPIV3 == nil {
			continue
		}
		prefix := openAPIPathPrefix(st.GVR.GroupVersion())
		byGV[prefix] = append(byGV[prefix], st.Custom.OpenAPIV3)
	}
	return byGV
}

// serveOpenAPIV3 answers /openapi/v3 (the index) and /openapi/v3/<prefix>.
func (s *Server) serveOpenAPIV3(w http.ResponseWriter, req *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(req.URL.Path, "/openapi/v3"), "/")
	var body []byte
	set := s.openapi.current.Load()
	if rest == "" {
		body = set.getIndex()
	} else if d, ok := set.docs[rest]; ok {
		var err error
		if body, _, err = d.get(); err != nil {
			// Left out of the index, as kube leaves out what it
			// cannot describe.
			w.WriteHeader(http.StatusNotFound)
			return
		}
	} else {
		// kube's OpenAPI v3 handler: 404 without a body.
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if req.URL.Query().Get("hash") != "" {
		w.Header().Set("Cache-Control", "public, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache, private")
	}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
