package registry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustplane/trustplane/api/webhookclient"
	"github.com/trustplane/trustplane/fsm"
)

// The rules a CustomResourceDefinition must keep to be stored or served,
// beyond apiextensions' own (kube's strategy). They keep a definition from
// reaching what is not its own:
//
//   - its group is not reserved: trustplane's internal group
//     (fsm.InternalGroup, where the signing keys, removal markers and
//     data-directory records are written) or any group under it;
//   - its group is not a group of built-in resources (served or stored,
//     in any version, whatever --runtime-config serves): a built-in store
//     always wins the URL, so a definition of a built-in resource could
//     only alias or shadow it, and one of another resource in a built-in
//     group could claim a built-in kind or short name there, so that
//     clients mapping kinds through discovery (kubectl) send a built-in
//     kind's writes to it (issue 28's red team: a ClusterRole applied with
//     kubectl landed in a custom resource);
//   - a conversion webhook is given by URL: trustplane runs no Service
//     proxy, so a Service reference could never be called
//     (webhookclient.NoServiceReference). Every node calls the URL when
//     it converts the resource's objects, with no credential of its own,
//     https only (kube's validation), bounded in time (kube's 30 s) and
//     in the size of its answer (webhookclient.Limit).
//
// A create or update that breaks one is refused with kube's 422 Invalid,
// naming the field and the reason (validateDefinition). A definition
// stored before these rules that breaks one is not served, and its
// Refused condition says why (DefinitionRefusal). Custom objects live in
// their own key space (fsm.SpaceCustom) whatever the definition names;
// these rules are the second wall, and the clear answer.

// RefusedCondition is the condition trustplane sets on a stored definition
// it will not serve (DefinitionRefusal), with the reason as its message.
// kube has no such condition; it is trustplane's (docs/COMPATIBILITY.md).
const RefusedCondition apiextensionsv1.CustomResourceDefinitionConditionType = "Refused"

// ErrRefusedDefinition: a definition breaks a rule above.
var ErrRefusedDefinition = errors.New("the custom resource definition may not be served")

// reservedGroup reports trustplane's internal group and the groups under it.
func reservedGroup(group string) bool {
	return group == fsm.InternalGroup || strings.HasSuffix(group, "."+fsm.InternalGroup)
}

// builtinGroup reports whether a built-in store or virtual resource of
// the node serves or stores a resource of group, in any version, served or
// not.
func (r *Registry) builtinGroup(group string) bool {
	root := r.root()
	for gvr, s := range root.stores {
		if gvr.Group == group || s.Stored().Group == group {
			return true
		}
	}
	for k := range root.virtuals {
		if k.gvr.Group == group {
			return true
		}
	}
	return false
}

// definitionErrors are the rules above as field errors of the spec.
func (r *Registry) definitionErrors(f definitionFields) field.ErrorList {
	group := f.group
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if reservedGroup(group) {
		errs = append(errs, field.Invalid(spec.Child("group"), group,
			fmt.Sprintf("the group %s and the groups under it are reserved for trustplane", fsm.InternalGroup)))
	} else if r.builtinGroup(group) {
		errs = append(errs, field.Invalid(spec.Child("group"), group,
			"the group has built-in resources of this server; custom resources need a group of their own"))
	}
	if f.conversionService {
		errs = append(errs, field.Forbidden(spec.Child("conversion", "webhook", "clientConfig", "service"), webhookclient.NoServiceReference))
	}
	return errs
}

// validateDefinition is the rules' validating step of the
// CustomResourceDefinition store (registry.New adds it): 422 Invalid with
// kube's wording, as a strategy's validation error reads. An update that
// keeps the group and conversion of the stored definition passes,
// as kube's validation ratchets: a definition stored before the rules must
// still take its status, its finalizer's removal and its deletion, or it
// could never go.
func (r *Registry) validateDefinition(ctx context.Context, obj, old runtime.Object, _ bool) error {
	crd, ok := obj.(*apiextensions.CustomResourceDefinition)
	if !ok {
		return nil
	}
	prev, _ := old.(*apiextensions.CustomResourceDefinition)
	if prev == nil || !reflect.DeepEqual(prev.Status.AcceptedNames, crd.Status.AcceptedNames) {
		if err := r.acceptedNamesConflict(ctx, crd); err != nil {
			return err
		}
	}
	if prev != nil && ruledFields(prev) == ruledFields(crd) {
		return nil
	}
	if errs := r.definitionErrors(ruledFields(crd)); len(errs) > 0 {
		return apierrors.NewInvalid(apiextensions.Kind("CustomResourceDefinition"), crd.Name, errs)
	}
	return nil
}

// acceptedNamesConflict refuses accepted names that another definition of
// the group has accepted (its plural, singular, short names, kind or list
// kind), as kube's naming controller would never accept them: status is
// written by whoever may update customresourcedefinitions/status, and
// forged names would let one definition answer for another's in clients
// that map names and kinds through discovery (issue 29's red team: a
// victim's kubectl writes of kind Widget, stored in the attacker's
// resource).
func (r *Registry) acceptedNamesConflict(ctx context.Context, crd *apiextensions.CustomResourceDefinition) error {
	a := crd.Status.AcceptedNames
	if a.Plural == "" && a.Kind == "" {
		return nil
	}
	crds := r.root().stores[CustomResourceDefinitionsGVR]
	if crds == nil {
		return nil
	}
	list, err := crds.List(ctx, &metainternalversion.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	path := field.NewPath("status", "acceptedNames")
	var errs field.ErrorList
	for _, other := range list.(*apiextensions.CustomResourceDefinitionList).Items {
		if other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		o := other.Status.AcceptedNames
		resources := map[string]bool{o.Plural: true, o.Singular: true}
		for _, n := range o.ShortNames {
			resources[n] = true
		}
		kinds := map[string]bool{o.Kind: true, o.ListKind: true}
		delete(resources, "")
		delete(kinds, "")
		conflict := func(p *field.Path, name string, taken map[string]bool) {
			if name != "" && taken[name] {
				errs = append(errs, field.Invalid(p, name, "is accepted by definition "+other.Name))
			}
		}
		conflict(path.Child("plural"), a.Plural, resources)
		conflict(path.Child("singular"), a.Singular, resources)
		for i, n := range a.ShortNames {
			conflict(path.Child("shortNames").Index(i), n, resources)
		}
		conflict(path.Child("kind"), a.Kind, kinds)
		conflict(path.Child("listKind"), a.ListKind, kinds)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(apiextensions.Kind("CustomResourceDefinition"), crd.Name, errs)
	}
	return nil
}

// definitionFields are what the rules read of a definition: its group,
// and whether its conversion webhook names a Service.
type definitionFields struct {
	group             string
	conversionService bool
}

func ruledFields(crd *apiextensions.CustomResourceDefinition) definitionFields {
	c := crd.Spec.Conversion
	return definitionFields{group: crd.Spec.Group,
		conversionService: c != nil && c.WebhookClientConfig != nil && c.WebhookClientConfig.Service != nil}
}

// DefinitionRefusal says why the node will not serve crd, a stored
// definition, wrapping ErrRefusedDefinition and ErrNotServable; nil when
// the rules above hold. The message names the rule, never the stored
// bytes.
func (r *Registry) DefinitionRefusal(crd *apiextensionsv1.CustomResourceDefinition) error {
	c := crd.Spec.Conversion
	errs := r.definitionErrors(definitionFields{group: crd.Spec.Group,
		conversionService: c != nil && c.Webhook != nil && c.Webhook.ClientConfig != nil && c.Webhook.ClientConfig.Service != nil})
	if len(errs) == 0 {
		return nil
	}
	return &RefusedError{Errs: errs}
}

// RefusedError is DefinitionRefusal's answer: the rules a definition
// breaks, as field errors of its spec. It is ErrRefusedDefinition and
// ErrNotServable.
type RefusedError struct{ Errs field.ErrorList }

func (e *RefusedError) Error() string { return e.Errs.ToAggregate().Error() }

func (e *RefusedError) Is(target error) bool {
	return target == ErrRefusedDefinition || target == ErrNotServable
}
