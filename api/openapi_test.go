package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/utils/ptr"

	"github.com/trustplane/trustplane/api/registry"
)

// TestOpenAPIVirtualOperations: reviews and subresource creates appear as
// POST operations with kube's operation IDs and their kind's schema.
func TestOpenAPIVirtualOperations(t *testing.T) {
	authn := schema.GroupVersion{Group: "authentication.k8s.io", Version: "v1"}
	docs, err := openAPIV3Docs(nil, []*registry.Virtual{
		{GVR: authn.WithResource("tokenreviews"), KindName: "TokenReview"},
		{GVR: schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, Subresource: "token", KindName: "TokenRequest", RequestGV: &authn, Namespaced: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ prefix, path, id, schema string }{
		{"apis/authentication.k8s.io/v1", "/apis/authentication.k8s.io/v1/tokenreviews", "createAuthenticationV1TokenReview", "io.k8s.api.authentication.v1.TokenReview"},
		{"api/v1", "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", "createCoreV1NamespacedTokenRequest", "io.k8s.api.authentication.v1.TokenRequest"},
	}
	for _, c := range cases {
		var doc struct {
			Paths map[string]map[string]json.RawMessage `json:"paths"`
			Comps struct {
				Schemas map[string]json.RawMessage `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(docs[c.prefix], &doc); err != nil {
			t.Fatalf("%s: %v", c.prefix, err)
		}
		var post struct {
			ID     string `json:"operationId"`
			Action string `json:"x-kubernetes-action"`
		}
		if err := json.Unmarshal(doc.Paths[c.path]["post"], &post); err != nil {
			t.Fatalf("%s: no POST operation: %v", c.path, err)
		}
		if post.ID != c.id || post.Action != "post" {
			t.Errorf("%s: operation %+v, want %s", c.path, post, c.id)
		}
		if _, ok := doc.Comps.Schemas[c.schema]; !ok {
			t.Errorf("%s: schema %s missing", c.prefix, c.schema)
		}
	}
}

// TestOpenAPIV3RoundTrip is the upstream e2e spec "should round trip
// OpenAPI V3 for all built-in group versions": every group version's
// document, read into kube-openapi's types and written again, is the same
// JSON. An empty list where kube-openapi omits the key (omitempty) fails.
func TestOpenAPIV3RoundTrip(t *testing.T) {
	e := newFuzzEnv(t)
	if len(e.s.openapi.current.Load().docs) == 0 {
		t.Fatal("no OpenAPI v3 documents")
	}
	for prefix, d := range e.s.openapi.current.Load().docs {
		b, _, err := d.get()
		if err != nil {
			t.Errorf("%s: %v", prefix, err)
			continue
		}
		var doc spec3.OpenAPI
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Errorf("%s: %v", prefix, err)
			continue
		}
		again, err := json.Marshal(&doc)
		if err != nil {
			t.Errorf("%s: %v", prefix, err)
			continue
		}
		var want, got any
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(again, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s does not round-trip through kube-openapi's spec3.OpenAPI", prefix)
		}
	}
}

// widgetDefinition is a definition of kind in group, served in versions
// (the first stored and preferred): a spec and status of a dozen typed
// fields, nested objects, a list of objects, an int-or-string, a
// preserved object and a validation rule, as a typical operator's
// definition. gen changes a description, so that each generation is a
// changed definition.
func widgetDefinition(uid, group, kind string, gen int, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr.To[int64](253)}
	num := apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr.To(0.0)}
	port := apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"name"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name": str, "port": num, "protocol": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"TCP"`)}, {Raw: []byte(`"UDP"`)}}},
	}}
	spec := apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: fmt.Sprintf("generation %d", gen),
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"image": str, "replicas": num, "paused": {Type: "boolean"},
			"ports":     {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &port}, XListType: ptr.To("map"), XListMapKeys: []string{"name"}},
			"resources": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"cpu": {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}}, "memory": str}},
			"labels":    {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}},
			"extra":     {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
		XValidations: apiextensionsv1.ValidationRules{{Rule: "self.replicas <= 100", Message: "at most 100 replicas"}},
	}
	status := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"ready": num, "phase": str, "observedGeneration": num,
	}}
	lower := strings.ToLower(kind)
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: lower + "s", Singular: lower, Kind: kind, ListKind: kind + "List"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: names.Plural + "." + group, UID: types.UID(uid)},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Names: names, Scope: apiextensionsv1.NamespaceScoped,
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names},
	}
	for i, v := range versions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: i == 0,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec, "status": status},
			}},
			Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
		})
	}
	return crd
}

// benchDefinition is definition i of the churn benchmark, in a group of
// its own (one group version per definition, the most documents a change
// can touch).
func benchDefinition(i, gen int) *apiextensionsv1.CustomResourceDefinition {
	return widgetDefinition(fmt.Sprintf("bench-%d", i), fmt.Sprintf("g%d.bench.example.com", i), "Widget", gen, "v1")
}

// definitionResources builds crd's resources as the node does on a change
// (cmd/trustplane's customResources.sync).
func definitionResources(tb testing.TB, crd *apiextensionsv1.CustomResourceDefinition) []*registry.Resource {
	tb.Helper()
	static, err := CustomResourceSchemas()
	if err != nil {
		tb.Fatal(err)
	}
	resources, err := registry.CustomResources(crd, static)
	if err != nil {
		tb.Fatal(err)
	}
	return resources
}

// serveDefinition builds crd's resources, serves them and runs the hook,
// as the node does on a change.
func serveDefinition(tb testing.TB, s *Server, crd *apiextensionsv1.CustomResourceDefinition) {
	tb.Helper()
	s.reg.ServeCustom(crd.UID, definitionResources(tb, crd))
	s.CustomResourcesChanged()
}

// get serves one GET of path (OpenAPI or /apis) by s's handler for it
// and fails unless it is a 200.
func get(tb testing.TB, s *Server, path string) []byte {
	tb.Helper()
	rec := getRec(s, path)
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d", path, rec.Code)
	}
	return rec.Body.Bytes()
}

// getRec is the answer to a GET of path, in JSON (aggregated discovery
// for /apis).
func getRec(s *Server, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	switch {
	case path == "/apis":
		req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		s.discovery.groups.ServeHTTP(rec, req)
	case strings.HasPrefix(path, "/openapi/v2"):
		s.openapiV2.ServeHTTP(rec, req)
	default:
		s.serveOpenAPIV3(rec, req)
	}
	return rec
}

// TestCustomResourcesChangedIncremental: the hook redoes only what a
// change touches, yet what it serves after any sequence of changes is
// what a server started with the same definitions serves: the aggregated
// /apis document, the v3 index and documents, and /openapi/v2. A group
// version the change leaves alone keeps its v3 document (and hash), a
// changed one is built only when read, and a call with nothing changed
// keeps everything.
func TestCustomResourcesChangedIncremental(t *testing.T) {
	env, err := buildFuzzEnv(false)
	if err != nil {
		t.Fatal(err)
	}
	s := env.s
	const alpha, beta = "alpha.example.com", "beta.example.com"
	// served are the resources served per definition, as a fresh server
	// is given them.
	served := map[types.UID][]*registry.Resource{}
	serve := func(crd *apiextensionsv1.CustomResourceDefinition) {
		served[crd.UID] = definitionResources(t, crd)
		s.reg.ServeCustom(crd.UID, served[crd.UID])
		s.CustomResourcesChanged()
	}
	unserve := func(uid types.UID) {
		delete(served, uid)
		s.reg.ServeCustom(uid, nil)
		s.CustomResourcesChanged()
	}
	gadget := func(gen int, versions ...string) *apiextensionsv1.CustomResourceDefinition {
		return widgetDefinition("uid-gadget", beta, "Gadget", gen, versions...)
	}
	steps := []struct {
		name  string
		apply func()
	}{
		{"a definition", func() { serve(widgetDefinition("uid-widget", alpha, "Widget", 0, "v1")) }},
		{"one in another group, two versions", func() { serve(gadget(0, "v1", "v2")) }},
		{"a second definition in a group version", func() { serve(widgetDefinition("uid-doohickey", beta, "Doohickey", 0, "v1")) }},
		{"a definition changed", func() { serve(widgetDefinition("uid-widget", alpha, "Widget", 1, "v1")) }},
		{"another version of a group, from another definition", func() { serve(widgetDefinition("uid-thing", beta, "Thing", 0, "v1alpha1")) }},
		{"a version added", func() { serve(gadget(1, "v1", "v2", "v1beta1")) }},
		{"a version dropped", func() { serve(gadget(2, "v1")) }},
		{"a definition no longer served", func() { unserve("uid-doohickey") }},
		{"the last of a group no longer served", func() { unserve("uid-widget") }},
	}
	for _, step := range steps {
		step.apply()
		compareServed(t, step.name, s, freshServer(t, s, served))
	}

	// A change rebuilds only its group version, when read.
	serveDefinition(t, s, widgetDefinition("uid-widget", alpha, "Widget", 2, "v1"))
	before := s.openapi.current.Load()
	get(t, s, "/openapi/v3")
	serveDefinition(t, s, widgetDefinition("uid-widget", alpha, "Widget", 3, "v1"))
	after := s.openapi.current.Load()
	const alphaDoc, betaDoc = "apis/" + alpha + "/v1", "apis/" + beta + "/v1"
	if after.docs[betaDoc] != before.docs[betaDoc] {
		t.Error("a change of alpha replaced beta's v3 document")
	}
	if after.docs[alphaDoc] == before.docs[alphaDoc] {
		t.Fatal("a change of alpha kept its v3 document")
	}
	if after.docs[alphaDoc].body != nil {
		t.Error("alpha's v3 document was built before it was read")
	}
	if _, _, err := after.docs[alphaDoc].get(); err != nil || after.docs[alphaDoc].body == nil {
		t.Errorf("alpha's v3 document, read: %v", err)
	}
	// Nothing changed: the same generation, the same v2 ETag.
	etag := getRec(s, "/openapi/v2").Header().Get("Etag")
	s.CustomResourcesChanged()
	if s.openapi.current.Load() != after {
		t.Error("a call with nothing changed replaced the v3 documents")
	}
	if again := getRec(s, "/openapi/v2").Header().Get("Etag"); again != etag || etag == "" {
		t.Errorf("v2 ETag %s after a call with nothing changed, was %s", again, etag)
	}
}

// freshServer is a server started without custom resources that is then
// given, in one change, the resources s serves, in s's order.
func freshServer(t *testing.T, s *Server, served map[types.UID][]*registry.Resource) *Server {
	t.Helper()
	env, err := buildFuzzEnv(false)
	if err != nil {
		t.Fatal(err)
	}
	done := map[types.UID]bool{}
	for _, st := range s.reg.Stores() {
		if st.Custom != nil && !done[st.Custom.UID] {
			done[st.Custom.UID] = true
			env.s.reg.ServeCustom(st.Custom.UID, served[st.Custom.UID])
		}
	}
	env.s.CustomResourcesChanged()
	return env.s
}

// TestCustomResourcesChangedWhileRead: documents are read (and so built)
// while definitions change: every read of a served group version's
// document, the index and /openapi/v2 succeeds (run with -race, reads
// and changes share the lazily built documents).
func TestCustomResourcesChangedWhileRead(t *testing.T) {
	env, err := buildFuzzEnv(false)
	if err != nil {
		t.Fatal(err)
	}
	s := env.s
	serveDefinition(t, s, benchDefinition(0, 0))
	serveDefinition(t, s, benchDefinition(1, 0))
	done := make(chan struct{})
	failed := make(chan string, 3)
	var wg sync.WaitGroup
	for _, path := range []string{"/openapi/v3", "/openapi/v3/apis/g0.bench.example.com/v1", "/openapi/v2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if rec := getRec(s, path); rec.Code != http.StatusOK {
					failed <- fmt.Sprintf("GET %s: %d", path, rec.Code)
					return
				}
			}
		}()
	}
	for gen := 1; gen <= 5; gen++ {
		serveDefinition(t, s, benchDefinition(gen%2, gen))
	}
	close(done)
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Error(f)
	}
}

// compareServed fails unless s serves what want does: the aggregated /apis
// document, the v3 index and every document it names, and /openapi/v2.
func compareServed(t *testing.T, step string, s, want *Server) {
	t.Helper()
	for _, path := range []string{"/apis", "/openapi/v3", "/openapi/v2"} {
		if got, exp := get(t, s, path), get(t, want, path); string(got) != string(exp) {
			t.Errorf("%s: %s differs from a fresh server's:\n%.2000s\nwant\n%.2000s", step, path, got, exp)
		}
	}
	var index struct {
		Paths map[string]struct{} `json:"paths"`
	}
	if err := json.Unmarshal(get(t, want, "/openapi/v3"), &index); err != nil {
		t.Fatal(err)
	}
	for prefix := range index.Paths {
		path := "/openapi/v3/" + prefix
		if got, exp := get(t, s, path), get(t, want, path); string(got) != string(exp) {
			t.Errorf("%s: %s differs from a fresh server's", step, path)
		}
	}
}

// BenchmarkCustomResourceChange is the cost of one definition changing
// while n are served (n group versions): "serve" is the hook alone (the
// definition's resources, built beforehand, served, and discovery and
// OpenAPI refreshed), "change" what the node does on the change (building
// the resources too), and "+v3" and "+v2" that followed by the next GET
// of the v3 index and the changed group version's document, or of
// /openapi/v2. A change must cost the same whatever n is; only the v2
// merge, on the request after a change, grows with n.
//
//	go test -run '^$' -bench BenchmarkCustomResourceChange -benchtime 100x ./api/
func BenchmarkCustomResourceChange(b *testing.B) {
	for _, n := range []int{1, 8, 32} {
		env, err := buildFuzzEnv(false)
		if err != nil {
			b.Fatal(err)
		}
		s := env.s
		for i := range n {
			serveDefinition(b, s, benchDefinition(i, 0))
		}
		get(b, s, "/openapi/v2")
		get(b, s, "/openapi/v3")
		gen := 0
		change := func() {
			gen++
			serveDefinition(b, s, benchDefinition(0, gen))
		}
		// Two generations of definition 0, served in turn: new stores
		// and specs each time, as after a rebuild.
		built := [][]*registry.Resource{definitionResources(b, benchDefinition(0, 1)), definitionResources(b, benchDefinition(0, 2))}
		b.Run(fmt.Sprintf("crds=%d/serve", n), func(b *testing.B) {
			for i := range b.N {
				s.reg.ServeCustom(benchDefinition(0, 0).UID, built[i%2])
				s.CustomResourcesChanged()
			}
		})
		b.Run(fmt.Sprintf("crds=%d/change", n), func(b *testing.B) {
			for range b.N {
				change()
			}
		})
		b.Run(fmt.Sprintf("crds=%d/change+v3", n), func(b *testing.B) {
			for range b.N {
				change()
				get(b, s, "/openapi/v3")
				get(b, s, "/openapi/v3/apis/g0.bench.example.com/v1")
			}
		})
		b.Run(fmt.Sprintf("crds=%d/change+v2", n), func(b *testing.B) {
			for range b.N {
				change()
				get(b, s, "/openapi/v2")
			}
		})
	}
}
