package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/spec3"

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
	for prefix, b := range e.s.openapi.current.Load().docs {
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
