package registry

import (
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
)

// widgetCRD is a valid definition of widgets.example.com, v1, namespaced,
// with a structural schema, as v1's decoding leaves it.
func widgetCRD() *apiextensions.CustomResourceDefinition {
	return &apiextensions.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensions.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensions.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensions.NamespaceScoped,
			Versions: []apiextensions.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
			}},
			Validation: &apiextensions.CustomResourceValidation{OpenAPIV3Schema: &apiextensions.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensions.JSONSchemaProps{
					"spec": {Type: "object", Properties: map[string]apiextensions.JSONSchemaProps{"size": {Type: "integer"}}},
				},
			}},
			Conversion:            &apiextensions.CustomResourceConversion{Strategy: apiextensions.NoneConverter},
			PreserveUnknownFields: ptr(false),
		},
	}
}

func TestCustomResourceDefinitionValidation(t *testing.T) {
	e := newEnvWith(t, append(append(CoreResources(), RBACResources()...), CustomResourceDefinitionResources()...), nil)
	crds := e.reg.Store(CustomResourceDefinitionsGVR)

	notStructural := widgetCRD()
	notStructural.Name = "gadgets.example.com"
	notStructural.Spec.Names = apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"}
	notStructural.Spec.Validation.OpenAPIV3Schema.Properties["spec"] = apiextensions.JSONSchemaProps{Properties: map[string]apiextensions.JSONSchemaProps{"size": {Type: "integer"}}}
	wrongName := widgetCRD()
	wrongName.Name = "widgets.example.org"
	// Three nested unbounded lists, compared pairwise: far over the budget.
	costly := widgetCRD()
	costly.Name, costly.Spec.Names = "costlies.example.com", apiextensions.CustomResourceDefinitionNames{Plural: "costlies", Singular: "costly", Kind: "Costly", ListKind: "CostlyList"}
	costly.Spec.Validation.OpenAPIV3Schema.Properties["spec"] = apiextensions.JSONSchemaProps{
		Type:         "object",
		Properties:   map[string]apiextensions.JSONSchemaProps{"names": {Type: "array", Items: &apiextensions.JSONSchemaPropsOrArray{Schema: &apiextensions.JSONSchemaProps{Type: "string"}}}},
		XValidations: apiextensions.ValidationRules{{Rule: "self.names.all(a, self.names.all(b, a == b || a != b))"}},
	}
	named := func(group, plural string) *apiextensions.CustomResourceDefinition {
		crd := widgetCRD()
		crd.Name, crd.Spec.Group, crd.Spec.Names.Plural = plural+"."+group, group, plural
		// Anyone may write kube's approval annotation for a *.k8s.io group.
		crd.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"}
		return crd
	}
	webhook := widgetCRD()
	webhook.Name, webhook.Spec.Names = "hooks.example.com", apiextensions.CustomResourceDefinitionNames{Plural: "hooks", Singular: "hook", Kind: "Hook", ListKind: "HookList"}
	webhook.Spec.Conversion = &apiextensions.CustomResourceConversion{Strategy: apiextensions.WebhookConverter,
		WebhookClientConfig:      &apiextensions.WebhookClientConfig{Service: &apiextensions.ServiceReference{Namespace: "default", Name: "conv", Port: 443}},
		ConversionReviewVersions: []string{"v1"}}
	urlHook := webhook.DeepCopy()
	urlHook.Name, urlHook.Spec.Names = "urlhooks.example.com", apiextensions.CustomResourceDefinitionNames{Plural: "urlhooks", Singular: "urlhook", Kind: "URLHook", ListKind: "URLHookList"}
	urlHook.Spec.Conversion.WebhookClientConfig = &apiextensions.WebhookClientConfig{URL: ptr("https://127.0.0.1:1/convert")}
	for _, tc := range []struct {
		name string
		crd  *apiextensions.CustomResourceDefinition
		want []string // parts of the message; none: created
	}{
		{name: "a structural definition is created", crd: widgetCRD()},
		// Issue 28: definitions that would reach what is not their own.
		{name: "the internal group is reserved", crd: named("trustplane.internal", "signingkeys"),
			want: []string{`CustomResourceDefinition.apiextensions.k8s.io "signingkeys.trustplane.internal" is invalid: spec.group: Invalid value: "trustplane.internal": the group trustplane.internal and the groups under it are reserved for trustplane`}},
		{name: "groups under the internal group are reserved", crd: named("x.trustplane.internal", "things"),
			want: []string{`spec.group: Invalid value: "x.trustplane.internal": the group trustplane.internal and the groups under it are reserved`}},
		{name: "a built-in resource cannot be defined", crd: named("rbac.authorization.k8s.io", "clusterroles"),
			want: []string{`spec.group: Invalid value: "rbac.authorization.k8s.io": the group has built-in resources of this server; custom resources need a group of their own`}},
		{name: "a built-in resource of another group cannot be defined", crd: named("apiextensions.k8s.io", "customresourcedefinitions"),
			want: []string{`spec.group: Invalid value: "apiextensions.k8s.io": the group has built-in resources of this server`}},
		// A new resource in a built-in group could claim a built-in kind
		// there (kind ClusterRole), which kubectl would map to it.
		{name: "no other resource in a built-in group", crd: named("rbac.authorization.k8s.io", "widgets"),
			want: []string{`spec.group: Invalid value: "rbac.authorization.k8s.io": the group has built-in resources of this server`}},
		{name: "a conversion webhook by Service is refused", crd: webhook,
			want: []string{`CustomResourceDefinition.apiextensions.k8s.io "hooks.example.com" is invalid: spec.conversion.webhook.clientConfig.service: Forbidden: trustplane cannot reach Services; give the webhook's address as clientConfig.url`}},
		{name: "a conversion webhook by URL is created", crd: urlHook},
		{name: "a schema that is not structural is refused", crd: notStructural,
			want: []string{`CustomResourceDefinition.apiextensions.k8s.io "gadgets.example.com" is invalid`, `spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields`}},
		{name: "the name is plural.group", crd: wrongName,
			want: []string{`metadata.name: Invalid value: "widgets.example.org": must be spec.names.plural+"."+spec.group`}},
		{name: "a rule over its estimated cost is refused", crd: costly,
			want: []string{`x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := crds.Create(e.in(""), tc.crd, false)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				crd := out.(*apiextensions.CustomResourceDefinition)
				if crd.Generation != 1 || len(crd.Status.StoredVersions) != 1 || crd.Status.StoredVersions[0] != "v1" {
					t.Errorf("generation %d, storedVersions %v; want 1 and [v1]", crd.Generation, crd.Status.StoredVersions)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err.Error(), w)
				}
			}
		})
	}
}

// TestCustomResourceDefinitionDeletion: the first delete only marks the
// definition Terminating with the cleanup finalizer, whatever the options
// say; removing the finalizer (the cleanup controller's last step) deletes
// it.
func TestCustomResourceDefinitionDeletion(t *testing.T) {
	e := newEnvWith(t, append(CoreResources(), CustomResourceDefinitionResources()...), nil)
	crds := e.reg.Store(CustomResourceDefinitionsGVR)
	if _, err := crds.Create(e.in(""), widgetCRD(), false); err != nil {
		t.Fatal(err)
	}
	out, done, err := crds.Delete(e.in(""), "widgets.example.com", &metav1.DeleteOptions{}, false)
	if err != nil || done {
		t.Fatalf("first delete: done %v, %v; want marked", done, err)
	}
	crd := out.(*apiextensions.CustomResourceDefinition)
	if crd.DeletionTimestamp == nil || !apiextensions.CRDHasFinalizer(crd, apiextensions.CustomResourceCleanupFinalizer) ||
		!apiextensions.IsCRDConditionTrue(crd, apiextensions.Terminating) {
		t.Fatalf("marked definition: deletion %v, finalizers %v, conditions %v", crd.DeletionTimestamp, crd.Finalizers, crd.Status.Conditions)
	}
	// A second delete answers as pending.
	if _, done, err := crds.Delete(e.in(""), "widgets.example.com", &metav1.DeleteOptions{}, false); err != nil || done {
		t.Fatalf("second delete: done %v, %v", done, err)
	}
	cleaned := crd.DeepCopy()
	apiextensions.CRDRemoveFinalizer(cleaned, apiextensions.CustomResourceCleanupFinalizer)
	if _, err := crds.Update(e.in(""), cleaned.Name, rest.DefaultUpdatedObjectInfo(cleaned), false); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Get(e.in(""), "widgets.example.com", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the finalizer went: %v, want NotFound", err)
	}
}

// Accepted names another definition of the group has accepted are refused
// on a status write (issue 29's red team forged them to take a kind and a
// singular that clients map to the other definition).
func TestCustomResourceDefinitionAcceptedNamesConflict(t *testing.T) {
	e := newEnvWith(t, append(CoreResources(), CustomResourceDefinitionResources()...), nil)
	crds := e.reg.Store(CustomResourceDefinitionsGVR)
	accept := func(crd *apiextensions.CustomResourceDefinition, names apiextensions.CustomResourceDefinitionNames) error {
		cur, err := crds.Get(e.in(""), crd.Name, &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := cur.(*apiextensions.CustomResourceDefinition).DeepCopy()
		c.Status.AcceptedNames = names
		_, err = crds.UpdateSubresource(e.in(""), "status", c.Name, rest.DefaultUpdatedObjectInfo(c), false)
		return err
	}
	widgets := widgetCRD()
	if _, err := crds.Create(e.in(""), widgets, false); err != nil {
		t.Fatal(err)
	}
	if err := accept(widgets, widgets.Spec.Names); err != nil {
		t.Fatalf("the naming controller's write: %v", err)
	}
	gadgets := widgetCRD()
	gadgets.Name = "gadgets.example.com"
	gadgets.Spec.Names = apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList", ShortNames: []string{"gd"}}
	if _, err := crds.Create(e.in(""), gadgets, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		names apiextensions.CustomResourceDefinitionNames
		want  string
	}{
		{"another's kind", apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Widget", ListKind: "GadgetList"},
			`status.acceptedNames.kind: Invalid value: "Widget": is accepted by definition widgets.example.com`},
		{"another's plural as a singular", apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "widgets", Kind: "Gadget", ListKind: "GadgetList"},
			`status.acceptedNames.singular: Invalid value: "widgets"`},
		{"another's singular as a short name", apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList", ShortNames: []string{"widget"}},
			`status.acceptedNames.shortNames[0]: Invalid value: "widget"`},
		{"another's list kind", apiextensions.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "WidgetList"},
			`status.acceptedNames.listKind: Invalid value: "WidgetList"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := accept(gadgets, tc.names)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("status write: %v, want 422 with %q", err, tc.want)
			}
		})
	}
	if err := accept(gadgets, gadgets.Spec.Names); err != nil {
		t.Fatalf("names of its own: %v", err)
	}
}
