package api

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/api/registry"
)

// Fuzz targets for every request body and query the handlers decode:
// object bodies in JSON, YAML and protobuf (create, update), the four patch
// kinds, DeleteOptions bodies, CSRs and trust bundles (PEM), the token
// APIs' bodies, and list queries (label and field selectors, continue
// tokens, resourceVersion, limit). Each runs the handler against the real
// stores (fuzzenv_test.go) and checks that it does not panic, that an error
// is a failure Status, and that an error leaves every stored object as it
// was.

// fuzzResource is one served resource the targets write to, with the
// object the environment holds in it.
type fuzzResource struct {
	collection string // collection path
	name       string // the stored object
	apiVersion string
	kind       string
}

func (r fuzzResource) item() string { return r.collection + "/" + r.name }

var fuzzResources = []fuzzResource{
	{"/api/v1/namespaces/fuzz/configmaps", "cm", "v1", "ConfigMap"},
	{"/api/v1/namespaces/fuzz/secrets", "s", "v1", "Secret"},
	{"/api/v1/namespaces/fuzz/serviceaccounts", "sa", "v1", "ServiceAccount"},
	{"/api/v1/namespaces/fuzz/pods", "p", "v1", "Pod"},
	{"/api/v1/namespaces", "fuzz", "v1", "Namespace"},
	{"/apis/rbac.authorization.k8s.io/v1/clusterroles", "cr", "rbac.authorization.k8s.io/v1", "ClusterRole"},
	{"/apis/rbac.authorization.k8s.io/v1/namespaces/fuzz/roles", "r", "rbac.authorization.k8s.io/v1", "Role"},
	{"/apis/certificates.k8s.io/v1/certificatesigningrequests", "csr", "certificates.k8s.io/v1", "CertificateSigningRequest"},
	{"/apis/certificates.k8s.io/v1beta1/clustertrustbundles", "ctb", "certificates.k8s.io/v1beta1", "ClusterTrustBundle"},
}

// fuzzBodyTypes are the Content-Types a body is sent with: the three the
// server decodes and two it must refuse.
var fuzzBodyTypes = []string{
	"application/json",
	"application/yaml",
	"application/vnd.kubernetes.protobuf",
	"application/json; charset=utf-8",
	"text/plain",
}

// fieldValidations are the fieldValidation query values tried.
var fieldValidations = []string{"", "Ignore", "Warn", "Strict", "bogus"}

// subresources are the subresource suffixes an update or patch is sent to.
var subresources = []string{"", "/status", "/approval", "/finalize"}

// hostileBodies are documents every body target is also fed.
var hostileBodies = []string{
	strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
	strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000),
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"data":{"k":1e999999999}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n","generation":123456789012345678901234567890}}`,
	"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"n\"},\"data\":{\"k\":\"\xff\xfe\"}}",
	`{"apiVersion":"v1","kind":"ConfigMap","kind":"Secret","metadata":{"name":"n","name":"m"}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"unknown":{"x":1},"data":{"k":"v","k":"w"}}`,
	`{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"n"}}`,
	`{"apiVersion":"v1","kind":"Status","status":"Failure"}`,
	`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap"}]}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n","managedFields":[{"manager":"m","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:x":{"f:y":{}}}}]}}`,
	`{"metadata":{"name":"n"}`,
	"a: &a [*a, *a]\n",
	"a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: n\n---\napiVersion: v1\nkind: Secret\n",
	"k8s\x00",
	"k8s\x00\x0a\x0e\x0a\x02v1\x12\x08ConfigMa",
	"k8s\x00\x0a\xff\xff\xff\xff\x0f",
	"k8s\x00\x12\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
	"",
	"null",
}

// protobufOf encodes a JSON object of the served kinds as the protobuf a
// client would send.
func protobufOf(tb testing.TB, jsonBody string) []byte {
	tb.Helper()
	obj, gvk, err := registry.Codecs.UniversalDeserializer().Decode([]byte(jsonBody), nil, nil)
	if err != nil {
		tb.Fatalf("seed %s: %v", jsonBody, err)
	}
	info, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	out, err := runtime.Encode(registry.Codecs.EncoderForVersion(info.Serializer, gvk.GroupVersion()), obj)
	if err != nil {
		tb.Fatalf("seed %s: %v", jsonBody, err)
	}
	return out
}

// addBodySeeds adds body in the three formats, and protobuf cut short.
func addBodySeeds(f *testing.F, body string, add func(ct uint8, b []byte)) {
	add(0, []byte(body))
	y, err := yaml.JSONToYAML([]byte(body))
	if err != nil {
		f.Fatal(err)
	}
	add(1, y)
	pb := protobufOf(f, body)
	add(2, pb)
	add(2, pb[:len(pb)*2/3])
}

// newObjects are valid create bodies, one per fuzzResource.
func newObjects(e *fuzzEnv) []string {
	csr, _ := json.Marshal(e.csrPEM)
	ca, _ := json.Marshal(string(e.caPEM))
	return []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"new","labels":{"a":"b"}},"data":{"k":"v"},"binaryData":{"b":"AAE="}}`,
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"new"},"type":"Opaque","data":{"k":"dg=="},"stringData":{"s":"t"}}`,
		`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"new"},"secrets":[{"name":"s"}],"automountServiceAccountToken":false}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"new"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}],"env":[{"name":"A","value":"1"}]}],"tolerations":[{"key":"k","operator":"Exists"}]}}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"new"},"spec":{"finalizers":["kubernetes"]}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"new"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}],"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"a":"b"}}]}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"new"},"rules":[{"verbs":["*"],"apiGroups":["*"],"resources":["*"]}]}`,
		`{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"new"},"spec":{"request":` + string(csr) +
			`,"signerName":"kubernetes.io/kube-apiserver-client","usages":["digital signature","client auth"],"expirationSeconds":600}}`,
		`{"apiVersion":"certificates.k8s.io/v1beta1","kind":"ClusterTrustBundle","metadata":{"name":"new"},"spec":{"trustBundle":` + string(ca) + `}}`,
	}
}

// FuzzCreateBody posts a body to a collection: decodeBody and everything
// after it in the create handler.
func FuzzCreateBody(f *testing.F) {
	e := newFuzzEnv(f)
	for i, body := range newObjects(e) {
		addBodySeeds(f, body, func(ct uint8, b []byte) { f.Add(uint8(i), ct, uint8(0), b) })
	}
	for i, h := range hostileBodies {
		f.Add(uint8(i), uint8(i%3), uint8(i%4), []byte(h))
	}
	f.Fuzz(func(t *testing.T, res, ct, fv uint8, body []byte) {
		e := newFuzzEnv(t)
		r := pick(fuzzResources, res)
		before := e.state(t)
		path := r.collection
		if v := pick(fieldValidations, fv); v != "" {
			path += "?fieldValidation=" + v
		}
		rec := e.do(http.MethodPost, path, pick(fuzzBodyTypes, ct), body)
		e.checkAnswer(t, rec, before)
	})
}

// FuzzUpdateBody puts a body over the stored object or one of its
// subresources.
func FuzzUpdateBody(f *testing.F) {
	e := newFuzzEnv(f)
	for i, r := range fuzzResources {
		rec := e.do(http.MethodGet, r.item(), "", nil)
		if rec.Code != http.StatusOK {
			f.Fatalf("get %s: %d %s", r.item(), rec.Code, rec.Body)
		}
		cur := rec.Body.String()
		addBodySeeds(f, cur, func(ct uint8, b []byte) { f.Add(uint8(i), ct, uint8(0), uint8(0), b) })
		f.Add(uint8(i), uint8(0), uint8(3), uint8(1), []byte(cur))
		f.Add(uint8(i), uint8(0), uint8(2), uint8(0), []byte(strings.Replace(cur, `"resourceVersion":"`, `"resourceVersion":"1`, 1)))
		f.Add(uint8(i), uint8(0), uint8(3), uint8(0), []byte(strings.Replace(cur, `"name":"`+r.name+`"`, `"name":"other"`, 1)))
	}
	for i, h := range hostileBodies {
		f.Add(uint8(i), uint8(i%3), uint8(i%4), uint8(0), []byte(h))
	}
	f.Fuzz(func(t *testing.T, res, ct, fv, sub uint8, body []byte) {
		e := newFuzzEnv(t)
		r := pick(fuzzResources, res)
		before := e.state(t)
		path := r.item() + pick(subresources, sub)
		if v := pick(fieldValidations, fv); v != "" {
			path += "?fieldValidation=" + v
		}
		rec := e.do(http.MethodPut, path, pick(fuzzBodyTypes, ct), body)
		e.checkAnswer(t, rec, before)
	})
}

// patchContentTypes are the patch kinds, and one that is not.
var patchContentTypes = []string{
	"application/json-patch+json",
	"application/merge-patch+json",
	"application/strategic-merge-patch+json",
	"application/apply-patch+yaml",
	"application/json",
}

// FuzzPatch sends the four patch kinds to the stored object (or to a new
// name, which only apply may create), with fieldValidation, force and
// subresource varied: patchInfo and applyInfo in the store's loop.
func FuzzPatch(f *testing.F) {
	json6902 := []string{
		`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
		`[{"op":"replace","path":"/metadata/name","value":"other"}]`,
		`[{"op":"test","path":"/metadata/labels/app","value":"nope"}]`,
		`[{"op":"remove","path":"/metadata/uid"}]`,
		`[{"op":"add","path":"/metadata/resourceVersion","value":"1"}]`,
		`[{"op":"copy","from":"/metadata","path":"/metadata/annotations/x"}]`,
		`[{"op":"add","path":"/a","value":["xxxxxxxx"]},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"},{"op":"copy","from":"/a","path":"/a/-"}]`,
		`[{"op":"add","path":"/metadata/labels/x","value":"y","extra":1}]`,
		`[{"op":"move","from":"/metadata/labels","path":"/metadata/labels/x"}]`,
	}
	merge := []string{
		`{"metadata":{"labels":{"x":"y","app":null}}}`,
		`{"metadata":{"name":"other"}}`,
		`{"metadata":{"namespace":"default"}}`,
		`{"metadata":{"resourceVersion":"1"}}`,
		`{"metadata":null,"kind":null,"apiVersion":"v2"}`,
		`{"data":{"k":null,"k2":"v"},"unknown":1}`,
		`{"spec":{"containers":[{"name":"c","image":"j"}]}}`,
		`{"status":{"phase":"Running","conditions":[{"type":"Approved","status":"True","reason":"r"}]}}`,
	}
	strategic := []string{
		`{"metadata":{"labels":{"x":"y"}}}`,
		`{"spec":{"containers":[{"name":"c","$patch":"delete"}]}}`,
		`{"spec":{"$setElementOrder/containers":[{"name":"d"},{"name":"c"}],"containers":[{"name":"d","image":"i"}]}}`,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]},"$patch":"replace"}`,
		`{"rules":[{"$patch":"delete"}]}`,
		`{"$patch":"delete"}`,
		`{"spec":{"$retainKeys":["containers"]}}`,
		`{"status":{"conditions":[{"type":"Approved","status":"True","reason":"r","$patch":"merge"}]}}`,
	}
	applies := map[string]string{}
	for _, r := range fuzzResources {
		applies[r.kind] = "apiVersion: " + r.apiVersion + "\nkind: " + r.kind + "\nmetadata:\n  name: " + r.name + "\n  labels:\n    applied: \"true\"\n"
	}
	for i := range fuzzResources {
		for _, p := range json6902 {
			f.Add(uint8(i), uint8(0), uint8(0), uint8(0), uint8(0), false, []byte(p))
		}
		for _, p := range merge {
			f.Add(uint8(i), uint8(1), uint8(3), uint8(i%2), uint8(0), false, []byte(p))
		}
		for _, p := range strategic {
			f.Add(uint8(i), uint8(2), uint8(2), uint8(i%3), uint8(0), false, []byte(p))
		}
		a := applies[fuzzResources[i].kind]
		f.Add(uint8(i), uint8(3), uint8(0), uint8(0), uint8(0), false, []byte(a))
		f.Add(uint8(i), uint8(3), uint8(3), uint8(0), uint8(1), true, []byte(a))
		f.Add(uint8(i), uint8(3), uint8(3), uint8(1), uint8(0), true, []byte(a+"  labels:\n    dup: x\n"))
	}
	for i, h := range hostileBodies {
		f.Add(uint8(i), uint8(i%4), uint8(i%5), uint8(0), uint8(0), i%2 == 0, []byte(h))
	}
	f.Fuzz(func(t *testing.T, res, pt, fv, sub, target uint8, force bool, body []byte) {
		e := newFuzzEnv(t)
		r := pick(fuzzResources, res)
		before := e.state(t)
		path := r.item()
		if target%2 == 1 {
			path = r.collection + "/new"
		}
		path += pick(subresources, sub)
		q := url.Values{}
		if v := pick(fieldValidations, fv); v != "" {
			q.Set("fieldValidation", v)
		}
		ct := pick(patchContentTypes, pt)
		if ct == "application/apply-patch+yaml" {
			q.Set("fieldManager", "fuzz")
			if force {
				q.Set("force", "true")
			}
		}
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		rec := e.do(http.MethodPatch, path, ct, body)
		e.checkAnswer(t, rec, before)
	})
}

// FuzzDeleteOptions deletes the stored object with a DeleteOptions body:
// the handler's own DeleteOptions decoding (preconditions, dry run, grace
// period, propagation).
func FuzzDeleteOptions(f *testing.F) {
	for i, b := range []string{
		`{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}`,
		`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"}}`,
		`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}`,
		`{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":-1,"propagationPolicy":"Orphan"}`,
		`{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":99999999999999999999}`,
		`{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Bogus","orphanDependents":true}`,
		`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All","All"]}`,
		`{"kind":"ConfigMap","apiVersion":"v1"}`,
		"kind: DeleteOptions\napiVersion: v1\ndryRun: [All]\n",
	} {
		f.Add(uint8(i), uint8(0), []byte(b))
		f.Add(uint8(i), uint8(1), []byte(b))
	}
	for i, h := range hostileBodies {
		f.Add(uint8(i), uint8(i%3), []byte(h))
	}
	f.Fuzz(func(t *testing.T, res, ct uint8, body []byte) {
		e := newFuzzEnv(t)
		r := pick(fuzzResources, res)
		before := e.state(t)
		rec := e.do(http.MethodDelete, r.item(), pick(fuzzBodyTypes, ct), body)
		e.checkAnswer(t, rec, before)
	})
}

// FuzzCSR creates CertificateSigningRequests whose PEM request, signer,
// usages and expiry come from the fuzzer: kube's CSR validation behind our
// create handler. A request the server accepts must hold a CSR that parses.
func FuzzCSR(f *testing.F) {
	e := newFuzzEnv(f)
	good := e.csrPEM
	block := strings.TrimSuffix(string(good), "\n")
	for _, req := range [][]byte{
		good,
		append(append([]byte{}, good...), []byte("trailing junk\n-----BEGIN GARBAGE-----\n")...),
		append(append([]byte{}, good...), good...),
		[]byte(strings.Replace(block, "CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST", 2)),
		[]byte(strings.Replace(block, "CERTIFICATE REQUEST", "CERTIFICATE", 2)),
		good[:len(good)/2],
		[]byte("-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n"),
		[]byte("-----BEGIN CERTIFICATE REQUEST-----\n" + strings.Repeat("A", 4096) + "\n-----END CERTIFICATE REQUEST-----\n"),
		[]byte("-----BEGIN CERTIFICATE REQUEST-----\nHeader: x\n\nMAA=\n-----END CERTIFICATE REQUEST-----\n"),
		{},
		[]byte("\xff\xfe"),
	} {
		f.Add(req, "kubernetes.io/kube-apiserver-client", "digital signature,client auth", int32(600))
		f.Add(req, "kubernetes.io/kubelet-serving", "server auth,key encipherment", int32(-1))
	}
	f.Add(good, "kubernetes.io/kube-apiserver-client-kubelet", "client auth", int32(0))
	f.Add(good, "example.com/x", "", int32(2147483647))
	f.Add(good, "kubernetes.io/legacy-unknown", "any,any,bogus", int32(599))
	f.Add(good, "a/b/c", "client auth", int32(1))
	f.Add(good, "", "client auth", int32(600))
	f.Fuzz(func(t *testing.T, request []byte, signer, usages string, expiry int32) {
		e := newFuzzEnv(t)
		spec := map[string]any{"request": request, "signerName": signer}
		if usages != "" {
			spec["usages"] = strings.Split(usages, ",")
		}
		if expiry != 0 {
			spec["expirationSeconds"] = expiry
		}
		body, err := json.Marshal(map[string]any{
			"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
			"metadata": map[string]any{"generateName": "csr-"}, "spec": spec,
		})
		if err != nil {
			t.Skip() // invalid UTF-8 in a string: not a JSON document a client can send
		}
		before := e.state(t)
		rec := e.do(http.MethodPost, "/apis/certificates.k8s.io/v1/certificatesigningrequests", "application/json", body)
		e.checkAnswer(t, rec, before)
		if rec.Code != http.StatusCreated {
			return
		}
		var out struct {
			Spec struct {
				Request []byte `json:"request"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if _, err := parseCSRPEM(out.Spec.Request); err != nil {
			t.Fatalf("accepted a CSR that does not parse: %v\n%q", err, request)
		}
	})
}

// FuzzTrustBundle creates ClusterTrustBundles whose PEM bundle and signer
// come from the fuzzer: kube's bundle validation (PEM blocks, certificate
// parsing, signer-derived names) behind our create handler. A bundle the
// server accepts holds only CERTIFICATE blocks that parse.
func FuzzTrustBundle(f *testing.F) {
	e := newFuzzEnv(f)
	ca := string(e.caPEM)
	for _, b := range []string{
		ca,
		ca + ca,
		ca + "trailing junk\n",
		"junk before\n" + ca,
		strings.Replace(ca, "CERTIFICATE", "CERTIFICATE REQUEST", 2),
		string(e.csrPEM),
		ca[:len(ca)/2],
		"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n",
		"-----BEGIN CERTIFICATE-----\nHeader: x\n\n" + strings.SplitN(ca, "\n", 2)[1],
		"",
	} {
		f.Add(b, "", "b1")
		f.Add(b, "example.com/signer", "example.com:signer:b1")
	}
	f.Add(ca, "kubernetes.io/kube-apiserver-client", "kubernetes.io:kube-apiserver-client:x")
	f.Add(ca, "a/b/c", "a:b:c:x")
	f.Add(ca, "example.com/signer", "example.com:signer:")
	f.Fuzz(func(t *testing.T, bundle, signer, name string) {
		e := newFuzzEnv(t)
		spec := map[string]any{"trustBundle": bundle}
		if signer != "" {
			spec["signerName"] = signer
		}
		body, err := json.Marshal(map[string]any{
			"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
			"metadata": map[string]any{"name": name}, "spec": spec,
		})
		if err != nil {
			t.Skip()
		}
		before := e.state(t)
		rec := e.do(http.MethodPost, "/apis/certificates.k8s.io/v1beta1/clustertrustbundles", "application/json", body)
		e.checkAnswer(t, rec, before)
		if rec.Code != http.StatusCreated {
			return
		}
		var out struct {
			Spec struct {
				TrustBundle string `json:"trustBundle"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		rest := []byte(out.Spec.TrustBundle)
		for n := 0; ; n++ {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				if n == 0 {
					t.Fatalf("accepted a bundle without certificates: %q", bundle)
				}
				break
			}
			if block.Type != "CERTIFICATE" {
				t.Fatalf("accepted a %s block: %q", block.Type, bundle)
			}
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				t.Fatalf("accepted a certificate that does not parse: %v: %q", err, bundle)
			}
		}
	})
}

// FuzzListQuery lists with fuzzed query parameters: listOptions (label
// and field selectors, converted through the scheme), the store's continue
// token, resourceVersion and limit handling, and the selectors' matching.
// A list never writes, whatever it answers; the items it returns are in
// the namespace asked for.
func FuzzListQuery(f *testing.F) {
	e := newFuzzEnv(f)
	rec := e.do(http.MethodGet, "/api/v1/namespaces?limit=1", "", nil)
	var page metav1.List
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || page.Continue == "" {
		f.Fatalf("no continue token: %v %s", err, rec.Body)
	}
	tok := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tokens := []string{
		page.Continue,
		tok(`{"v":"meta.k8s.io/v1","rv":1,"start":"/configmaps/default/"}`),
		tok(`{"v":"meta.k8s.io/v1","rv":18446744073709551615,"start":""}`),
		tok(`{"v":"meta.k8s.io/v1","rv":0,"start":"\u0000","latest":true}`),
		tok(`{"v":"meta.k8s.io/v1","rv":-1,"start":1}`),
		tok(`{"v":"x","rv":1}`),
		tok(`{"v":"meta.k8s.io/v1","rv":1,"start":"/secrets/kube-system/zzz"}`),
		tok("\xff\xfe"),
		"!!!",
		page.Continue + "=",
	}
	labelSels := []string{"", "app=fuzz", "app in (fuzz,x),!missing", "app notin (x)", "a!=b,c", "a=b=c", "x in (", "a.b/c-d=e_f",
		strings.Repeat("a,", 500) + "a", "app==fuzz", "!", "a in ()", "a>1", "a gt 1"}
	fieldSels := []string{"", "metadata.name=cm", "metadata.namespace!=x", "metadata.name==cm,metadata.namespace=fuzz", "spec.signerName=kubernetes.io/kube-apiserver-client",
		"status.phase=Running", "spec.nodeName=", "type=Opaque", "bogus=1", "a\\,b=c", "metadata.name", "=", "metadata.name!=\xff"}
	i := 0
	for _, tk := range tokens {
		f.Add(uint8(i), "", "", tk, "", "2", "")
		i++
	}
	for _, l := range labelSels {
		f.Add(uint8(i), l, "", "", "0", "", "")
		i++
	}
	for _, fs := range fieldSels {
		f.Add(uint8(i), "", fs, "", "", "1", "resourceVersionMatch=NotOlderThan")
		i++
	}
	for _, rv := range []string{"1", "99999999999999999999", "-1", "abc", "0"} {
		f.Add(uint8(i), "", "", "", rv, "1", "resourceVersionMatch=Exact")
		i++
	}
	f.Add(uint8(0), "", "", page.Continue, "5", "", "")
	f.Add(uint8(0), "", "", "", "", "-5", "timeoutSeconds=-1&allowWatchBookmarks=true&sendInitialEvents=true")
	f.Add(uint8(0), "", "", "", "", "", "watch=true")
	f.Add(uint8(0), "", "", "", "", "", "includeObject=Object&as=Table")
	f.Fuzz(func(t *testing.T, res uint8, labelSel, fieldSel, cont, rv, limit, extra string) {
		e := newFuzzEnv(t)
		r := pick(fuzzResources, res)
		q, err := url.ParseQuery(extra)
		if err != nil {
			q = url.Values{}
		}
		for k, v := range map[string]string{"labelSelector": labelSel, "fieldSelector": fieldSel, "continue": cont, "resourceVersion": rv, "limit": limit} {
			if v != "" {
				q.Set(k, v)
			}
		}
		before := e.state(t)
		rec := e.do(http.MethodGet, r.collection+"?"+q.Encode(), "", nil)
		if after := e.state(t); after != before {
			t.Fatalf("a list changed the stored state")
		}
		e.checkAnswer(t, rec, before)
		if rec.Code != http.StatusOK || !strings.Contains(r.collection, "/namespaces/fuzz/") {
			return
		}
		var list struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
			return // a Table
		}
		for _, it := range list.Items {
			if it.Metadata.Namespace != fuzzNS {
				t.Fatalf("a list of namespace %s returned %s/%s", fuzzNS, it.Metadata.Namespace, it.Metadata.Name)
			}
		}
	})
}

// fuzzVirtuals are the token APIs' POST paths: bodies decoded by
// serveVirtual and handed to kube's REST code.
var fuzzVirtuals = []string{
	"/apis/authentication.k8s.io/v1/tokenreviews",
	"/apis/authentication.k8s.io/v1/selfsubjectreviews",
	"/api/v1/namespaces/fuzz/serviceaccounts/sa/token",
	"/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
}

// FuzzVirtualBody posts bodies to the token APIs. They store nothing, so
// no answer may change state; a TokenReview may only authenticate the
// ServiceAccount the seeds minted a token for.
func FuzzVirtualBody(f *testing.F) {
	e := newFuzzEnv(f)
	rec := e.do(http.MethodPost, fuzzVirtuals[2], "application/json",
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["https://kubernetes.default.svc.cluster.local"],"expirationSeconds":3600}}`))
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tr); err != nil || tr.Status.Token == "" {
		f.Fatalf("no token: %d %s", rec.Code, rec.Body)
	}
	parts := strings.Split(tr.Status.Token, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	review := func(token string, auds ...string) string {
		b, _ := json.Marshal(map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
			"spec": map[string]any{"token": token, "audiences": auds},
		})
		return string(b)
	}
	for _, body := range []string{
		review(tr.Status.Token),
		review(tr.Status.Token, "other-audience"),
		review(b64([]byte(`{"alg":"none"}`)) + "." + parts[1] + "."),
		review(b64([]byte(`{"alg":"HS256"}`)) + "." + parts[1] + "." + parts[2]),
		review(parts[0] + "." + parts[1]),
		review(""),
	} {
		addBodySeeds(f, body, func(ct uint8, b []byte) { f.Add(uint8(0), ct, b) })
	}
	f.Add(uint8(0), uint8(0), []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":1,"token":"x"}}`))
	f.Add(uint8(1), uint8(0), []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	f.Add(uint8(3), uint8(1), []byte("apiVersion: authentication.k8s.io/v1beta1\nkind: SelfSubjectReview\nstatus: {userInfo: {username: root}}\n"))
	for _, body := range []string{
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["a"],"expirationSeconds":600}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":-1}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":9223372036854775807}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"p","uid":"wrong"}}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"boundObjectRef":{"kind":"Secret","apiVersion":"v1","name":"s"}}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"boundObjectRef":{"kind":"Node","apiVersion":"v1","name":"n"}}}`,
		`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","metadata":{"name":"other"},"spec":{}}`,
	} {
		addBodySeeds(f, body, func(ct uint8, b []byte) { f.Add(uint8(2), ct, b) })
	}
	for i, h := range hostileBodies {
		f.Add(uint8(i), uint8(i%3), []byte(h))
	}
	f.Fuzz(func(t *testing.T, v, ct uint8, body []byte) {
		e := newFuzzEnv(t)
		before := e.state(t)
		rec := e.do(http.MethodPost, pick(fuzzVirtuals, v), pick(fuzzBodyTypes, ct), body)
		if after := e.state(t); after != before {
			t.Fatalf("answer %d but the stored state changed", rec.Code)
		}
		e.checkAnswer(t, rec, before)
		if v%uint8(len(fuzzVirtuals)) != 0 || rec.Code != http.StatusCreated {
			return
		}
		var out struct {
			Status struct {
				Authenticated bool `json:"authenticated"`
				User          struct {
					Username string `json:"username"`
				} `json:"user"`
			} `json:"status"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.Status.Authenticated && out.Status.User.Username != "system:serviceaccount:fuzz:sa" {
			t.Fatalf("a TokenReview authenticated %q", out.Status.User.Username)
		}
	})
}
