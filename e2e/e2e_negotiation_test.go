package e2e_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

var protoMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// TestNegotiation checks JSON, YAML, protobuf, Table and partial-metadata
// output, gzip, and refusals of media types the server does not speak.
func TestNegotiation(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	c := n.httpClient()
	base := n.url() + "/api/v1/namespaces/default/"

	t.Run("protobuf client round trip", func(t *testing.T) {
		pcs := n.protoClientset()
		sa, err := pcs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: "proto", Labels: map[string]string{"via": "proto"}},
			Secrets:    []corev1.ObjectReference{{Name: "s"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := pcs.CoreV1().ServiceAccounts("default").Get(ctx, "proto", metav1.GetOptions{})
		if err != nil || got.UID != sa.UID || got.Labels["via"] != "proto" || len(got.Secrets) != 1 {
			t.Fatalf("get over protobuf: %v %+v", err, got)
		}
		list, err := pcs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{LabelSelector: "via=proto"})
		if err != nil || len(list.Items) != 1 || list.ResourceVersion == "" {
			t.Fatalf("list over protobuf: %v %+v", err, list)
		}
		bin := []byte{0, 1, 2, 0xff, 0xfe}
		cm, err := pcs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "proto-cm"}, BinaryData: map[string][]byte{"bin": bin}, Data: map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Written in protobuf, read back in JSON: the same object.
		jcm, err := n.clientset().CoreV1().ConfigMaps("default").Get(ctx, "proto-cm", metav1.GetOptions{})
		if err != nil || !bytes.Equal(jcm.BinaryData["bin"], bin) || jcm.Data["k"] != "v" || jcm.ResourceVersion != cm.ResourceVersion {
			t.Fatalf("protobuf write, JSON read: %v %+v", err, jcm)
		}
		p, err := pcs.CoreV1().Pods("default").Create(ctx, minimalPod("proto-pod"), metav1.CreateOptions{})
		if err != nil || p.Spec.RestartPolicy != corev1.RestartPolicyAlways {
			t.Fatalf("pod over protobuf: %v", err)
		}
		// Errors come back as Status over protobuf too.
		_, err = pcs.CoreV1().ServiceAccounts("default").Get(ctx, "missing", metav1.GetOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `serviceaccounts "missing" not found`)
		_, err = pcs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"}}, metav1.CreateOptions{})
		st := wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "*")
		if len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "metadata.name" {
			t.Fatalf("causes over protobuf: %+v", st.Details)
		}
	})

	t.Run("raw protobuf", func(t *testing.T) {
		for _, path := range []string{"serviceaccounts", "serviceaccounts/proto"} {
			r := do(t, c, http.MethodGet, base+path, map[string]string{"Accept": "application/vnd.kubernetes.protobuf"}, nil)
			if r.code != 200 || !bytes.HasPrefix(r.body, protoMagic) {
				t.Fatalf("%s: %d, body starts %q", path, r.code, r.body[:min(len(r.body), 8)])
			}
			if ct := r.header.Get("Content-Type"); ct != "application/vnd.kubernetes.protobuf" {
				t.Fatalf("%s: Content-Type %q", path, ct)
			}
		}
		// A client that prefers protobuf but accepts JSON gets protobuf.
		r := do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/vnd.kubernetes.protobuf, application/json"}, nil)
		if !bytes.HasPrefix(r.body, protoMagic) {
			t.Fatalf("protobuf-first Accept answered %q", r.header.Get("Content-Type"))
		}
	})

	t.Run("JSON and YAML", func(t *testing.T) {
		for _, tc := range []struct{ accept, ct, prefix string }{
			{"", "application/json", "{"},
			{"*/*", "application/json", "{"},
			{"application/json", "application/json", "{"},
			{"application/yaml", "application/yaml", "apiVersion: v1\nkind: ServiceAccount\n"},
		} {
			h := map[string]string{}
			if tc.accept != "" {
				h["Accept"] = tc.accept
			}
			r := do(t, c, http.MethodGet, base+"serviceaccounts/proto", h, nil)
			if r.code != 200 || r.header.Get("Content-Type") != tc.ct || !strings.HasPrefix(string(r.body), tc.prefix) {
				t.Fatalf("Accept %q: %d %q %q", tc.accept, r.code, r.header.Get("Content-Type"), r.body)
			}
		}
		// A YAML body is accepted on create.
		r := do(t, c, http.MethodPost, base+"configmaps", map[string]string{"Content-Type": "application/yaml"},
			[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  a: b\n"))
		if r.code != 201 {
			t.Fatalf("YAML create: %d %s", r.code, r.body)
		}
	})

	t.Run("Table", func(t *testing.T) {
		for _, gv := range []string{"v1", "v1beta1"} {
			accept := "application/json;as=Table;g=meta.k8s.io;v=" + gv + ",application/json"
			r := do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": accept}, nil)
			var table metav1.Table
			if err := json.Unmarshal(r.body, &table); err != nil || r.code != 200 {
				t.Fatalf("%d %v %s", r.code, err, r.body)
			}
			if table.Kind != "Table" || table.APIVersion != "meta.k8s.io/"+gv {
				t.Fatalf("table kind %s/%s", table.APIVersion, table.Kind)
			}
			var cols []string
			for _, cd := range table.ColumnDefinitions {
				cols = append(cols, cd.Name)
			}
			if strings.Join(cols, ",") != "Name,Secrets,Age" {
				t.Fatalf("columns %v", cols)
			}
			if len(table.Rows) == 0 || table.ResourceVersion == "" {
				t.Fatalf("%d rows, rv %q", len(table.Rows), table.ResourceVersion)
			}
			var row struct {
				Kind, APIVersion string
				Metadata         metav1.ObjectMeta
			}
			if err := json.Unmarshal(table.Rows[0].Object.Raw, &row); err != nil || row.Kind != "PartialObjectMetadata" || row.Metadata.Name == "" {
				t.Fatalf("row object: %v %s", err, table.Rows[0].Object.Raw)
			}
		}
		// One object as a Table, with the full object embedded.
		r := do(t, c, http.MethodGet, base+"pods/proto-pod?includeObject=Object", map[string]string{"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"}, nil)
		var table metav1.Table
		if err := json.Unmarshal(r.body, &table); err != nil || len(table.Rows) != 1 {
			t.Fatalf("pod table: %v %s", err, r.body)
		}
		if table.Rows[0].Cells[0] != "proto-pod" || table.ColumnDefinitions[1].Name != "Ready" {
			t.Fatalf("pod table row %v, columns %v", table.Rows[0].Cells, table.ColumnDefinitions)
		}
		var pod corev1.Pod
		if err := json.Unmarshal(table.Rows[0].Object.Raw, &pod); err != nil || pod.Kind != "Pod" || len(pod.Spec.Containers) != 1 {
			t.Fatalf("embedded pod: %v %s", err, table.Rows[0].Object.Raw)
		}
		// A Table in a group version that has none: 406.
		r = do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/json;as=Table;g=example.com;v=v1"}, nil)
		wantStatus(t, r, 406, metav1.StatusReasonNotAcceptable, "")
		// kube serves Tables in JSON and YAML only.
		r = do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/yaml;as=Table;g=meta.k8s.io;v=v1"}, nil)
		if r.code != 200 || !strings.HasPrefix(string(r.body), "apiVersion: meta.k8s.io/v1\n") || !strings.Contains(string(r.body), "kind: Table\n") {
			t.Fatalf("YAML Table: %d %s", r.code, r.body)
		}
		r = do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"}, nil)
		wantStatus(t, r, 406, metav1.StatusReasonNotAcceptable, "")
		// A review has no table convertor: a POST asking for its Table is
		// 406, as kube-apiserver's, not a 201 with the review.
		for _, path := range []string{"/apis/authentication.k8s.io/v1/tokenreviews", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
			"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"} {
			r = do(t, c, http.MethodPost, n.url()+path, map[string]string{"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1", "Content-Type": "application/json"},
				[]byte(`{"spec":{"token":"x","resourceAttributes":{"verb":"get","resource":"pods"}}}`))
			wantStatus(t, r, 406, metav1.StatusReasonNotAcceptable, "")
		}
	})

	t.Run("PartialObjectMetadata", func(t *testing.T) {
		r := do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}, nil)
		var list metav1.PartialObjectMetadataList
		if err := json.Unmarshal(r.body, &list); err != nil || list.Kind != "PartialObjectMetadataList" || len(list.Items) == 0 {
			t.Fatalf("%v %s", err, r.body)
		}
		r = do(t, c, http.MethodGet, base+"serviceaccounts/proto", map[string]string{"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}, nil)
		var one metav1.PartialObjectMetadata
		if err := json.Unmarshal(r.body, &one); err != nil || one.Kind != "PartialObjectMetadata" || one.Name != "proto" {
			t.Fatalf("%v %s", err, r.body)
		}
	})

	t.Run("gzip", func(t *testing.T) {
		// ~300 configmaps of ~600 bytes: a list well over kube's 128 KiB
		// compression threshold.
		cms := n.protoClientset().CoreV1().ConfigMaps("default")
		value := strings.Repeat("v", 600)
		var wg sync.WaitGroup
		errs := make(chan error, 300)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < 300; i += 8 {
					_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gz-%03d", i), Labels: map[string]string{"gz": "1"}},
						Data: map[string]string{"v": value}}, metav1.CreateOptions{})
					if err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		cfg := n.restConfig()
		cfg.DisableCompression = true // keep Go from decoding gzip transparently
		tr, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		raw := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		r := do(t, raw, http.MethodGet, base+"configmaps?labelSelector=gz%3D1", map[string]string{"Accept": "application/json", "Accept-Encoding": "gzip"}, nil)
		if r.code != 200 || r.header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("large list: %d, Content-Encoding %q", r.code, r.header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if len(plain) <= 128<<10 {
			t.Fatalf("list is only %d bytes", len(plain))
		}
		var list corev1.ConfigMapList
		if err := json.Unmarshal(plain, &list); err != nil || len(list.Items) != 300 {
			t.Fatalf("gunzipped list: %v, %d items", err, len(list.Items))
		}
		// Without Accept-Encoding, or for a small answer, no gzip.
		r = do(t, raw, http.MethodGet, base+"configmaps?labelSelector=gz%3D1", map[string]string{"Accept": "application/json"}, nil)
		if r.header.Get("Content-Encoding") != "" || !json.Valid(r.body) {
			t.Fatalf("gzip without Accept-Encoding: %q", r.header.Get("Content-Encoding"))
		}
		r = do(t, raw, http.MethodGet, base+"configmaps/gz-000", map[string]string{"Accept": "application/json", "Accept-Encoding": "gzip"}, nil)
		if r.header.Get("Content-Encoding") != "" || !json.Valid(r.body) {
			t.Fatalf("small answer gzipped: %q", r.header.Get("Content-Encoding"))
		}
		// Paging the same list.
		page, err := n.clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "gz=1", Limit: 100})
		if err != nil || len(page.Items) != 100 || page.Continue == "" {
			t.Fatalf("first page: %v, %d items, continue %q", err, len(page.Items), page.Continue)
		}
		total := len(page.Items)
		for page.Continue != "" {
			page, err = n.clientset().CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "gz=1", Limit: 100, Continue: page.Continue})
			if err != nil {
				t.Fatal(err)
			}
			total += len(page.Items)
		}
		if total != 300 {
			t.Fatalf("paged %d of 300", total)
		}
	})

	t.Run("refused media types", func(t *testing.T) {
		r := do(t, c, http.MethodGet, base+"serviceaccounts", map[string]string{"Accept": "application/xml"}, nil)
		wantStatus(t, r, 406, metav1.StatusReasonNotAcceptable, "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch")
		r = do(t, c, http.MethodPost, base+"serviceaccounts", map[string]string{"Content-Type": "text/plain"}, []byte("x"))
		wantStatus(t, r, 415, metav1.StatusReasonUnsupportedMediaType, "*")
	})

	t.Run("discovery", func(t *testing.T) {
		var versions metav1.APIVersions
		r := do(t, c, http.MethodGet, n.url()+"/api", nil, nil)
		if err := json.Unmarshal(r.body, &versions); err != nil || versions.Kind != "APIVersions" || len(versions.Versions) != 1 || versions.Versions[0] != "v1" {
			t.Fatalf("/api: %v %s", err, r.body)
		}
		// kubectl and client-go ask for aggregated discovery first: every
		// group, version and resource in one document.
		aggregated := map[string]string{"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"}
		resources := func(p string) map[string]string {
			r := do(t, c, http.MethodGet, n.url()+p, aggregated, nil)
			var agg apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(r.body, &agg); err != nil || r.code != 200 || agg.Kind != "APIGroupDiscoveryList" ||
				agg.APIVersion != "apidiscovery.k8s.io/v2" || r.header.Get("ETag") == "" {
				t.Fatalf("%s, aggregated: %d %v %s", p, r.code, err, r.body)
			}
			out := map[string]string{}
			for _, g := range agg.Items {
				for _, v := range g.Versions {
					for _, res := range v.Resources {
						key := g.Name + "/" + v.Version + "/" + res.Resource
						out[key] = string(res.Scope) + " " + strings.Join(res.Verbs, ",")
						for _, sub := range res.Subresources {
							out[key+"/"+sub.Subresource] = strings.Join(sub.Verbs, ",")
						}
					}
				}
			}
			return out
		}
		core := resources("/api")
		for key, want := range map[string]string{
			"/v1/configmaps":            "Namespaced create,delete,deletecollection,get,list,patch,update,watch",
			"/v1/namespaces":            "Cluster create,delete,get,list,patch,update,watch",
			"/v1/serviceaccounts/token": "create",
		} {
			if core[key] != want {
				t.Fatalf("aggregated /api: %s is %q, want %q (all: %v)", key, core[key], want, core)
			}
		}
		named := resources("/apis")
		for key, want := range map[string]string{
			"certificates.k8s.io/v1/certificatesigningrequests/approval": "get,patch,update",
			"authentication.k8s.io/v1/tokenreviews":                      "Cluster create",
			"rbac.authorization.k8s.io/v1/roles":                         "Namespaced create,delete,deletecollection,get,list,patch,update,watch",
		} {
			if named[key] != want {
				t.Fatalf("aggregated /apis: %s is %q, want %q (all: %v)", key, named[key], want, named)
			}
		}
		if _, ok := named["/v1/configmaps"]; ok {
			t.Fatal("aggregated /apis lists the core group")
		}
		for _, p := range []string{"/apis", "/apis/"} {
			var groups metav1.APIGroupList
			r = do(t, c, http.MethodGet, n.url()+p, nil, nil)
			if err := json.Unmarshal(r.body, &groups); err != nil || groups.Kind != "APIGroupList" || len(groups.Groups) == 0 {
				t.Fatalf("%s: %v %s", p, err, r.body)
			}
		}
		versions = metav1.APIVersions{}
		r = do(t, c, http.MethodGet, n.url()+"/api/", nil, nil)
		if err := json.Unmarshal(r.body, &versions); err != nil || versions.Kind != "APIVersions" || len(versions.Versions) != 1 {
			t.Fatalf("/api/: %v %s", err, r.body)
		}
		var rl metav1.APIResourceList
		r = do(t, c, http.MethodGet, n.url()+"/api/v1", nil, nil)
		if err := json.Unmarshal(r.body, &rl); err != nil || rl.GroupVersion != "v1" {
			t.Fatalf("/api/v1: %v %s", err, r.body)
		}
		verbs := map[string]string{}
		for _, res := range rl.APIResources {
			verbs[res.Name] = strings.Join(res.Verbs, ",")
		}
		want := map[string]string{
			"namespaces":      "create,delete,get,list,patch,update,watch",
			"serviceaccounts": "create,delete,deletecollection,get,list,patch,update,watch",
			"secrets":         "create,delete,deletecollection,get,list,patch,update,watch",
			"configmaps":      "create,delete,deletecollection,get,list,patch,update,watch",
			"pods":            "create,delete,deletecollection,get,list,patch,update,watch",
			"podtemplates":    "create,delete,deletecollection,get,list,patch,update,watch",
			"services":        "get,list,watch",
		}
		for res, v := range want {
			if verbs[res] != v {
				t.Errorf("%s verbs %q, want %q", res, verbs[res], v)
			}
		}
		// The discovery client sees the same.
		_, lists, err := n.clientset().Discovery().ServerGroupsAndResources()
		if err != nil || len(lists) == 0 {
			t.Fatalf("discovery client: %v", err)
		}
	})

	t.Run("openapi v3 paths", func(t *testing.T) {
		// kubectl's strict validation asks the v3 document whether PATCH
		// of a kind takes fieldValidation, through client-go's client.
		root, err := n.clientset().Discovery().OpenAPIV3().Paths()
		if err != nil {
			t.Fatal(err)
		}
		gv, ok := root["api/v1"]
		if !ok {
			t.Fatalf("openapi v3 index: %v", root)
		}
		raw, err := gv.Schema("application/json")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			OpenAPI    string `json:"openapi"`
			Paths      map[string]map[string]json.RawMessage
			Components struct {
				Schemas map[string]struct {
					GVK []map[string]string `json:"x-kubernetes-group-version-kind"`
				}
			}
		}
		if err := json.Unmarshal(raw, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
			t.Fatalf("api/v1 document: %v %.200s", err, raw)
		}
		var patch struct {
			Action     string            `json:"x-kubernetes-action"`
			GVK        map[string]string `json:"x-kubernetes-group-version-kind"`
			Parameters []struct{ Name, In string }
		}
		if err := json.Unmarshal(doc.Paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"], &patch); err != nil {
			t.Fatalf("configmap patch operation: %v", err)
		}
		hasFV := false
		for _, p := range patch.Parameters {
			hasFV = hasFV || p.Name == "fieldValidation" && p.In == "query"
		}
		if patch.Action != "patch" || patch.GVK["kind"] != "ConfigMap" || patch.GVK["version"] != "v1" || !hasFV {
			t.Fatalf("configmap patch operation: %+v", patch)
		}
		if _, ok := doc.Paths["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]; ok && n.isTrustplane() {
			t.Fatalf("read-only services offer patch")
		}
		if _, ok := doc.Paths["/api/v1/namespaces/{name}"]["get"]; !ok {
			t.Fatalf("namespace paths: %v", doc.Paths["/api/v1/namespaces/{name}"])
		}
		for name, kind := range map[string]string{"io.k8s.api.core.v1.ConfigMap": "ConfigMap", "io.k8s.api.core.v1.PodList": "PodList", "io.k8s.apimachinery.pkg.apis.meta.v1.Status": "Status"} {
			sch, ok := doc.Components.Schemas[name]
			if !ok || len(sch.GVK) == 0 || sch.GVK[0]["kind"] != kind {
				t.Fatalf("schema %s: %v %+v", name, ok, sch)
			}
		}
		if _, ok := doc.Components.Schemas["io.k8s.api.core.v1.Container"]; !ok {
			t.Fatalf("nested schemas are missing")
		}
		// kube's OpenAPI v3 handler: 404 without a body.
		r := do(t, c, http.MethodGet, n.url()+"/openapi/v3/apis/example.com/v1", nil, nil)
		if r.code != 404 || len(r.body) != 0 {
			t.Fatalf("unknown OpenAPI v3 document: %d %q, want 404 without a body", r.code, r.body)
		}
	})
}
