package registry

import (
	"errors"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"github.com/trustplane/trustplane/fsm"
)

// gizmoDefinition is a served, accepted definition of gizmos.example.com:
// v1 (stored) and v2, a defaulted and bounded size, a validation rule.
func gizmoDefinition() *apiextensionsv1.CustomResourceDefinition {
	one := float64(1)
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"size":  {Type: "integer", Minimum: &one, Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
					"color": {Type: "string"},
				},
				XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size <= 10", Message: "size must be at most 10"}},
			},
		},
	}}
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Singular: "gizmo", Kind: "Gizmo", ListKind: "GizmoList"}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.example.com", UID: "uid-1"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: names, Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schema},
				{Name: "v2", Served: true, Schema: schema},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names},
	}
}

var gizmosV1 = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}
var gizmosV2 = schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gizmos"}

// decodeCustom decodes body as a client's create through st's codecs,
// with the strict JSON serializer (fieldValidation Strict or Warn).
func decodeCustom(t *testing.T, st *Store, body string) (runtime.Object, error) {
	t.Helper()
	si, ok := runtime.SerializerInfoForMediaType(st.Codecs().SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON")
	}
	gvk := st.GVK()
	obj, _, err := st.Codecs().DecoderToVersion(si.StrictSerializer, st.Hub()).Decode([]byte(body), &gvk, st.NewFunc())
	return obj, err
}

func TestCustomResources(t *testing.T) {
	e := newEnvWith(t, CoreResources(), nil)
	resources, err := CustomResources(gizmoDefinition(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.ServeCustom("uid-1", resources)
	v1, v2 := e.reg.Store(gizmosV1), e.reg.Store(gizmosV2)
	if v1 == nil || v2 == nil {
		t.Fatal("gizmos are not served in v1 and v2")
	}
	if gvr, err := e.reg.Resolve(gizmosV2.GroupVersion().WithKind("Gizmo")); err != nil || gvr != gizmosV2 {
		t.Fatalf("Resolve: %v %v", gvr, err)
	}
	if v1.ListKind() != "GizmoList" || !v1.Namespaced || v1.Custom == nil {
		t.Fatalf("v1 store: list kind %q, namespaced %v", v1.ListKind(), v1.Namespaced)
	}
	ctx := genericapirequest.WithNamespace(e.ctx, "default")

	// Decoding prunes (and reports) what the schema lacks, keeps the
	// metadata, and defaults.
	obj, err := decodeCustom(t, v1, `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g1","labels":{"a":"b"}},"spec":{"color":"red","bogus":1}}`)
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.bogus"`) || obj == nil {
		t.Fatalf("decoding an unknown field: %v", err)
	}
	u := obj.(*unstructured.Unstructured)
	if spec, _, _ := unstructured.NestedMap(u.Object, "spec"); len(spec) != 2 || spec["size"] != int64(3) || spec["color"] != "red" {
		t.Fatalf("decoded spec %v, want color red and the default size 3", spec)
	}
	if u.GetLabels()["a"] != "b" {
		t.Fatalf("labels lost: %v", u.Object)
	}
	if _, err := v1.Create(ctx, u, false); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, body string
		want       string
	}{
		{"the schema's minimum", `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g2"},"spec":{"size":0}}`,
			`Gizmo.example.com "g2" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`},
		{"the validation rule", `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g2"},"spec":{"size":11}}`,
			`Gizmo.example.com "g2" is invalid: spec: Invalid value: "object": size must be at most 10`},
	} {
		obj, err := decodeCustom(t, v1, tc.body)
		if err != nil {
			t.Fatalf("%s: decoding: %v", tc.name, err)
		}
		_, err = v1.Create(ctx, obj, false)
		if !apierrors.IsInvalid(err) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}

	// Every served version reads the stored object, in its own version.
	got, err := v2.Get(ctx, "g1", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetObjectKind().GroupVersionKind() != gizmosV2.GroupVersion().WithKind("Gizmo") {
		t.Fatalf("read through v2 as %v", got.GetObjectKind().GroupVersionKind())
	}

	// Served anew (a changed definition), the objects remain; not served,
	// the resource is gone from the registry.
	changed := gizmoDefinition()
	changed.Spec.Versions = changed.Spec.Versions[:1]
	resources, err = CustomResources(changed, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.ServeCustom("uid-1", resources)
	if e.reg.Store(gizmosV2) != nil {
		t.Fatal("v2 is still served")
	}
	v1 = e.reg.Store(gizmosV1)
	if _, err := v1.Get(ctx, "g1", &metav1.GetOptions{}); err != nil {
		t.Fatalf("after the change: %v", err)
	}
	e.reg.ServeCustom("uid-1", nil)
	if e.reg.Store(gizmosV1) != nil || len(e.reg.Stores()) != len(CoreResources()) {
		t.Fatal("gizmos are still served")
	}
}

// A definition without accepted names, or whose name another
// definition's resource already has, serves nothing of its own.
func TestCustomResourcesNotServable(t *testing.T) {
	unnamed := gizmoDefinition()
	unnamed.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{}
	if _, err := CustomResources(unnamed, nil); !errors.Is(err, ErrNotServable) {
		t.Fatalf("without accepted names: %v", err)
	}
	e := newEnvWith(t, CoreResources(), nil)
	first, err := CustomResources(gizmoDefinition(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.ServeCustom("uid-1", first)
	again := gizmoDefinition()
	again.UID = "uid-2"
	second, err := CustomResources(again, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.reg.ServeCustom("uid-2", second)
	if st := e.reg.Store(gizmosV1); st == nil || st.Custom.UID != "uid-1" {
		t.Fatal("the second definition took the first one's resource")
	}
	e.reg.ServeCustom("uid-1", nil)
	if e.reg.Store(gizmosV1) != nil {
		t.Fatal("gizmos are served by a definition that was never given them")
	}
}

// ScaleOf reads kube's Scale from a custom object, missing replicas as 0
// (found false when the spec replicas are missing), and SetReplicas
// writes the spec replicas back.
func TestScalePaths(t *testing.T) {
	p := &ScalePaths{SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.replicas", LabelSelectorPath: ".status.selector"}
	cr := &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": "g", "namespace": "ns", "resourceVersion": "7"},
		"status":   map[string]interface{}{"replicas": int64(2), "selector": "app=g"},
	}}
	scale, found, err := p.ScaleOf(cr)
	if err != nil || found || scale.Spec.Replicas != 0 || scale.Status.Replicas != 2 || scale.Status.Selector != "app=g" ||
		scale.Name != "g" || scale.Namespace != "ns" || scale.ResourceVersion != "7" || scale.Kind != "Scale" || scale.APIVersion != "autoscaling/v1" {
		t.Fatalf("ScaleOf without spec replicas: %+v found %v err %v", scale, found, err)
	}
	if err := p.SetReplicas(cr, 5); err != nil {
		t.Fatal(err)
	}
	if scale, found, err = p.ScaleOf(cr); err != nil || !found || scale.Spec.Replicas != 5 {
		t.Fatalf("after SetReplicas: %+v found %v err %v", scale, found, err)
	}
	cr.Object["spec"] = map[string]interface{}{"size": "five"}
	if _, _, err := p.ScaleOf(cr); err == nil {
		t.Fatal("replicas that are not a number read as a Scale")
	}
}

// The specification's type mapping and property-name escaping, through
// the custom resource strategy: each rule holds for good and not for bad.
func TestCustomResourceRuleTypes(t *testing.T) {
	str := func(extra func(*apiextensionsv1.JSONSchemaProps)) apiextensionsv1.JSONSchemaProps {
		s := apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr(int64(64))}
		if extra != nil {
			extra(&s)
		}
		return s
	}
	setOf := apiextensionsv1.JSONSchemaProps{Type: "array", MaxItems: ptr(int64(8)), XListType: ptr("set"),
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: ptr(int64(8))}}}
	yes := true
	for _, tc := range []struct {
		name      string
		prop      string
		schema    apiextensionsv1.JSONSchemaProps
		rule      string
		good, bad interface{}
	}{
		{"a dash", "x-y", apiextensionsv1.JSONSchemaProps{Type: "integer"}, "self.x__dash__y > 0", int64(1), int64(0)},
		{"a dot", "a.b", apiextensionsv1.JSONSchemaProps{Type: "integer"}, "self.a__dot__b > 0", int64(1), int64(0)},
		{"a slash", "a/b", apiextensionsv1.JSONSchemaProps{Type: "integer"}, "self.a__slash__b > 0", int64(1), int64(0)},
		{"a double underscore", "a__b", apiextensionsv1.JSONSchemaProps{Type: "integer"}, "self.a__underscores__b > 0", int64(1), int64(0)},
		{"a reserved word", "namespace", str(nil), "self.__namespace__ != 'kube-system'", "apps", "kube-system"},
		{"a word containing a reserved word", "namespaces", str(nil), "self.namespaces != 'kube-system'", "apps", "kube-system"},
		{"int-or-string", "port", apiextensionsv1.JSONSchemaProps{XIntOrString: true}, "type(self.port) == int ? self.port > 0 : self.port == 'http'", "http", "ftp"},
		{"number is double", "ratio", apiextensionsv1.JSONSchemaProps{Type: "number"}, "type(self.ratio) == double && self.ratio < 1.0", 0.5, 1.5},
		{"format byte is bytes", "blob", str(func(s *apiextensionsv1.JSONSchemaProps) { s.Format = "byte" }), "type(self.blob) == bytes && size(self.blob) == 2", "aGk=", "aGVsbG8="},
		{"format date-time is a timestamp", "at", str(func(s *apiextensionsv1.JSONSchemaProps) { s.Format = "date-time" }), "self.at > timestamp('2020-01-01T00:00:00Z')", "2024-05-01T00:00:00Z", "2019-05-01T00:00:00Z"},
		{"format duration is a duration", "every", str(func(s *apiextensionsv1.JSONSchemaProps) { s.Format = "duration" }), "self.every <= duration('1h')", "30m", "2h"},
		{"a set concatenates as a union", "tags", setOf, "self.tags + ['a'] == self.tags", []interface{}{"a", "b"}, []interface{}{"b"}},
		{"an embedded resource has its kind and name", "template", apiextensionsv1.JSONSchemaProps{Type: "object", XEmbeddedResource: true, XPreserveUnknownFields: &yes},
			"self.template.kind == 'ConfigMap' && self.template.metadata.name.startsWith('cm-')",
			map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "cm-1"}},
			map[string]interface{}{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]interface{}{"name": "cm-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := gizmoDefinition()
			crd.Spec.Versions = crd.Spec.Versions[:1]
			crd.Spec.Versions[0].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{tc.prop: tc.schema},
					XValidations: apiextensionsv1.ValidationRules{{Rule: tc.rule, Message: "broken"}},
				}},
			}}
			e := newEnvWith(t, CoreResources(), nil)
			resources, err := CustomResources(crd, nil)
			if err != nil {
				t.Fatal(err)
			}
			e.reg.ServeCustom("uid-1", resources)
			st := e.reg.Store(gizmosV1)
			ctx := genericapirequest.WithNamespace(e.ctx, "default")
			for i, value := range []interface{}{tc.good, tc.bad} {
				obj := st.NewFunc().(*unstructured.Unstructured)
				obj.SetName([]string{"good", "bad"}[i])
				obj.Object["spec"] = map[string]interface{}{tc.prop: value}
				_, err := st.Create(ctx, obj, true)
				switch {
				case i == 0 && err != nil:
					t.Fatalf("%v: %v", value, err)
				case i == 1 && (err == nil || !strings.Contains(err.Error(), "broken")):
					t.Fatalf("%v: %v, want the rule's message", value, err)
				}
			}
		})
	}
}

// A custom resource is stored in its own key space, and its definition's
// finalizer deletes through its store, found by the definition's UID
// (issue 28): a definition that names a built-in resource, stored before
// the rules refused it, aliases nothing and deletes nothing.
func TestCustomObjectsAreTheirOwn(t *testing.T) {
	e := newEnvWith(t, append(CoreResources(), RBACResources()...), nil)
	// A legacy definition of clusterroles.rbac.authorization.k8s.io, served
	// as a custom resource (bypassing DefinitionRefusal, as a node before
	// the rules did).
	alias := gizmoDefinition()
	alias.Name, alias.UID, alias.Spec.Group = "clusterroles.rbac.authorization.k8s.io", "uid-alias", "rbac.authorization.k8s.io"
	alias.Spec.Names.Plural, alias.Status.AcceptedNames.Plural = "clusterroles", "clusterroles"
	alias.Spec.Versions[0].Name, alias.Spec.Versions[1].Name = "v9", "v10"
	alias.Spec.Scope = apiextensionsv1.ClusterScoped
	resources, err := CustomResources(alias, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.ServeCustom(alias.UID, resources); err != nil {
		t.Fatal(err)
	}
	custom := e.reg.Store(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v9", Resource: "clusterroles"})
	builtin := e.reg.Store(schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"})
	if custom == nil || builtin == nil || custom.Custom == nil {
		t.Fatal("the alias and the built-in store are not both served")
	}
	if k := custom.storage.Key("", "admin"); k.Space != fsm.SpaceCustom {
		t.Fatalf("the alias's key %v is not in the custom space", k)
	}
	obj, err := decodeCustom(t, custom, `{"apiVersion":"rbac.authorization.k8s.io/v9","kind":"Gizmo","metadata":{"name":"admin"},"spec":{"size":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := custom.Create(e.in(""), obj, false); err != nil {
		t.Fatalf("create through the alias: %v", err)
	}
	// The built-in list holds no custom object and decodes fine.
	list, err := builtin.List(e.in(""), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatalf("built-in list after the alias wrote: %v", err)
	}
	if items, _ := meta.ExtractList(list); len(items) != 0 {
		t.Fatalf("the built-in list holds %d objects, want none", len(items))
	}
	role := &rbac.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}
	if _, err := builtin.Create(e.in(""), role, false); err != nil {
		t.Fatalf("the built-in store's key is taken: %v", err)
	}

	// The alias's cleanup deletes its own objects, in the custom space.
	refused, err := e.reg.GetCustomResourceListerCollectionDeleter(alias)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refused.DeleteCollection(e.in(""), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := builtin.Get(e.in(""), "admin", &metav1.GetOptions{}); err != nil {
		t.Fatalf("the built-in ClusterRole is gone: %v", err)
	}

	// A good definition's finalizer deletes its objects, by UID.
	gizmos := gizmoDefinition()
	resources, err = CustomResources(gizmos, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.ServeCustom(gizmos.UID, resources); err != nil {
		t.Fatal(err)
	}
	v1 := e.reg.Store(gizmosV1)
	e.namespace(t, "ns")
	obj, err = decodeCustom(t, v1, `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g","namespace":"ns"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Create(e.in("ns"), obj, false); err != nil {
		t.Fatal(err)
	}
	del, err := e.reg.GetCustomResourceListerCollectionDeleter(gizmos)
	if err != nil {
		t.Fatal(err)
	}
	all, err := del.List(e.in(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.(*unstructured.UnstructuredList).Items); n != 1 {
		t.Fatalf("the finalizer lists %d gizmos, want 1", n)
	}
	if _, err := del.DeleteCollection(genericapirequest.WithNamespace(e.in(""), "ns"), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Get(e.in("ns"), "g", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the gizmo survived its definition's cleanup: %v", err)
	}
	// A definition no store serves (refused, or names not accepted): its
	// objects go by their keys, the custom space's group and spec plural.
	obj, err = decodeCustom(t, v1, `{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g2","namespace":"ns"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Create(e.in("ns"), obj, false); err != nil {
		t.Fatal(err)
	}
	unserved := gizmoDefinition()
	unserved.UID = "uid-unserved"
	del, err = e.reg.GetCustomResourceListerCollectionDeleter(unserved)
	if err != nil {
		t.Fatal(err)
	}
	if all, err = del.List(e.in(""), nil); err != nil || len(all.(*unstructured.UnstructuredList).Items) != 1 ||
		all.(*unstructured.UnstructuredList).Items[0].GetNamespace() != "ns" {
		t.Fatalf("the unserved definition's objects: %v %v", all, err)
	}
	if _, err := del.DeleteCollection(genericapirequest.WithNamespace(e.in(""), "ns"), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Get(e.in("ns"), "g2", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the gizmo survived the cleanup by keys: %v", err)
	}
	if _, err := builtin.Get(e.in(""), "admin", &metav1.GetOptions{}); err != nil {
		t.Fatalf("the built-in ClusterRole is gone: %v", err)
	}
}

// A definition is served under its spec's names only: status is written by
// whoever may update customresourcedefinitions/status, and accepted names
// of another definition's resource would make its store theirs (issue 28's
// red team).
func TestCustomResourcesAcceptedNamesAreTheSpecs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinitionNames)
		want   string
	}{
		{"the spec's names", func(*apiextensionsv1.CustomResourceDefinitionNames) {}, ""},
		{"another plural", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Plural = "widgets" }, `status.acceptedNames.plural "widgets" is not spec.names.plural "gizmos"`},
		{"another kind", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Kind = "ClusterRole" }, `status.acceptedNames.kind "ClusterRole" is not spec.names.kind "Gizmo"`},
		{"another list kind", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.ListKind = "X" }, "status.acceptedNames.listKind"},
		{"another singular", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Singular = "x" }, "status.acceptedNames.singular"},
		{"a short name the spec lacks", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.ShortNames = []string{"cm"} }, `status.acceptedNames.shortNames holds "cm"`},
		{"a category the spec lacks", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Categories = []string{"all"} }, `status.acceptedNames.categories holds "all"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := gizmoDefinition()
			tc.mutate(&crd.Status.AcceptedNames)
			_, err := CustomResources(crd, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNotServable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CustomResources = %v, want ErrNotServable: %s", err, tc.want)
			}
		})
	}
}

// Two definitions never share a stored resource, a kind or a name in one
// group: the older one is served, whatever order they come in, so every
// node serves the same one.
func TestCustomResourcesNamesAreNotShared(t *testing.T) {
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	def := func(uid types.UID, age int, plural, kind string, mutate func(*apiextensionsv1.CustomResourceDefinitionNames)) []*Resource {
		crd := gizmoDefinition()
		crd.UID, crd.Name = uid, plural+".example.com"
		crd.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(age) * time.Minute))
		crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.TrimSuffix(plural, "s"), Kind: kind, ListKind: kind + "List"}
		if mutate != nil {
			mutate(&crd.Spec.Names)
		}
		crd.Status.AcceptedNames = crd.Spec.Names
		crd.Spec.Versions[0].Name, crd.Spec.Versions[1].Name = "v"+string(uid), "w"+string(uid)
		res, err := CustomResources(crd, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tc := range []struct {
		name  string
		clash func(*apiextensionsv1.CustomResourceDefinitionNames)
		kind  string
	}{
		{"the same kind", nil, "Gizmo"},
		{"a singular that is the other's plural", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Singular = "gizmos" }, "Gadget"},
		{"a short name that is the other's singular", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.ShortNames = []string{"gizmo"} }, "Gadget"},
		{"a list kind that is the other's kind", func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.ListKind = "Gizmo" }, "Gadget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range []string{"older first", "younger first"} {
				e := newEnvWith(t, CoreResources(), nil)
				old := def("1", 0, "gizmos", "Gizmo", nil)
				young := def("2", 1, "gadgets", tc.kind, tc.clash)
				if order == "older first" {
					if _, err := e.reg.ServeCustom("1", old); err != nil {
						t.Fatal(err)
					}
					if _, err := e.reg.ServeCustom("2", young); !errors.Is(err, ErrNameConflict) {
						t.Fatalf("%s: the younger definition: %v", order, err)
					}
				} else {
					if _, err := e.reg.ServeCustom("2", young); err != nil {
						t.Fatal(err)
					}
					evicted, err := e.reg.ServeCustom("1", old)
					if err != nil || len(evicted) != 1 || evicted[0] != "2" {
						t.Fatalf("%s: the older definition: evicted %v, %v", order, evicted, err)
					}
				}
				if e.reg.Store(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gizmos"}) == nil ||
					e.reg.Store(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gadgets"}) != nil {
					t.Fatalf("%s: the older definition is not the one served", order)
				}
			}
		})
	}
}
