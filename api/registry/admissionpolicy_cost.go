package registry

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
)

// costCheckedPolicy is kube's ValidatingAdmissionPolicy strategy plus the
// specification's write-time cost rule: an expression whose worst-case
// estimated cost is over kube's per-expression limit for CRD validation
// rules (10,000,000) is refused with the message kube gives those rules.
// kube-apiserver does not check policies so (docs/COMPATIBILITY.md).
//
// The estimate is kube's (its CEL environment and cost estimator), with
// object, oldObject, params, request, namespaceObject and variables of
// unknown size: a policy cannot bound them, so an expression whose cost
// grows with them (a comprehension over object's lists) has no finite
// worst case and is left to the runtime budget, as kube leaves every
// policy. What is refused is an expression that is too costly by its own
// making: authorizer checks by the dozen, comprehensions over large
// literals.
//
// Only expressions new to the policy are estimated: one already stored
// keeps evaluating, as the compatibility rules keep stored expressions
// (validateUpdate).
func costCheckedPolicy(policy restStrategy) withRule {
	return withRule{policy, func(obj, old runtime.Object) field.ErrorList {
		prev, _ := old.(*admissionregistration.ValidatingAdmissionPolicy) // nil on create
		return policyCostErrors(obj.(*admissionregistration.ValidatingAdmissionPolicy), prev)
	}}
}

// policyExpression is one CEL expression of a policy and where it is.
type policyExpression struct {
	path       *field.Path
	expression string
	costName   string // what kube's message calls its cost
}

// policyExpressions lists every CEL expression of spec.
func policyExpressions(spec *admissionregistration.ValidatingAdmissionPolicySpec) []policyExpression {
	s := field.NewPath("spec")
	var out []policyExpression
	for i, c := range spec.MatchConditions {
		out = append(out, policyExpression{s.Child("matchConditions").Index(i).Child("expression"), c.Expression, "estimated rule cost"})
	}
	for i, v := range spec.Variables {
		out = append(out, policyExpression{s.Child("variables").Index(i).Child("expression"), v.Expression, "estimated rule cost"})
	}
	for i, v := range spec.Validations {
		out = append(out, policyExpression{s.Child("validations").Index(i).Child("expression"), v.Expression, "estimated rule cost"})
		if v.MessageExpression != "" {
			out = append(out, policyExpression{s.Child("validations").Index(i).Child("messageExpression"), v.MessageExpression, "estimated messageExpression cost"})
		}
	}
	for i, a := range spec.AuditAnnotations {
		out = append(out, policyExpression{s.Child("auditAnnotations").Index(i).Child("valueExpression"), a.ValueExpression, "estimated rule cost"})
	}
	return out
}

// policyCostErrors estimates each expression of p that old (nil on
// create) does not already hold.
func policyCostErrors(p, old *admissionregistration.ValidatingAdmissionPolicy) field.ErrorList {
	stored := map[string]bool{}
	if old != nil {
		for _, e := range policyExpressions(&old.Spec) {
			stored[e.expression] = true
		}
	}
	var errs field.ErrorList
	for _, e := range policyExpressions(&p.Spec) {
		if stored[e.expression] {
			continue
		}
		cost, ok := estimatedCost(e.expression)
		if ok && cost > apiextensionsvalidation.StaticEstimatedCostLimit {
			errs = append(errs, field.Forbidden(e.path, costMessage(e.costName, cost, apiextensionsvalidation.StaticEstimatedCostLimit)))
		}
	}
	return errs
}

// costEnv is the environment estimates are made in: kube's base
// environment at the server's compatibility version, with every variable a
// policy expression may name. Types are dynamic where kube's are richer
// (request, namespaceObject): they only widen what compiles, and an
// expression reaches the estimate only after kube's own validation
// compiled it.
var costEnv = sync.OnceValues(func() (*cel.Env, error) {
	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(plugincel.ObjectVarName, cel.DynType),
			cel.Variable(plugincel.OldObjectVarName, cel.DynType),
			cel.Variable(plugincel.ParamsVarName, cel.DynType),
			cel.Variable(plugincel.RequestVarName, cel.DynType),
			cel.Variable(plugincel.NamespaceVarName, cel.DynType),
			cel.Variable(plugincel.VariableVarName, cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable(plugincel.AuthorizerVarName, library.AuthorizerType),
			cel.Variable(plugincel.RequestResourceAuthorizerVarName, library.ResourceCheckType),
		},
	})
	if err != nil {
		return nil, err
	}
	return set.Env(environment.StoredExpressions)
})

// estimatedCost is expr's worst-case estimated cost, and whether it has a
// finite one: one that does not grow with the inputs' sizes. It is
// estimated twice, with every input's size bounded by one and by a
// million; a cost that differs grows with the inputs (the cost is
// monotonic in sizes, so one flat over that range does not depend on
// them).
func estimatedCost(expr string) (uint64, bool) {
	env, err := costEnv()
	if err != nil {
		return 0, false
	}
	ast, issues := env.Compile(expr)
	if issues.Err() != nil {
		return 0, false
	}
	var max [2]uint64
	for i, size := range []uint64{1, 1 << 20} {
		est, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: unknownSizes(size)})
		if err != nil {
			return 0, false
		}
		max[i] = est.Max
	}
	if max[0] != max[1] {
		return 0, false
	}
	return max[0], true
}

// unknownSizes bounds the size of every value drawn from the request
// (object and the other inputs a policy names), which nothing bounds but
// the request's own size. Everything else CEL sizes itself: literals,
// scalars, and the iteration variables of comprehensions over them.
type unknownSizes uint64

// policyInputs are the variables whose values come with the request.
var policyInputs = map[string]bool{
	plugincel.ObjectVarName: true, plugincel.OldObjectVarName: true, plugincel.ParamsVarName: true,
	plugincel.RequestVarName: true, plugincel.NamespaceVarName: true, plugincel.VariableVarName: true,
}

func (n unknownSizes) EstimateSize(node checker.AstNode) *checker.SizeEstimate {
	if p := node.Path(); len(p) > 0 && policyInputs[p[0]] {
		return &checker.SizeEstimate{Min: 0, Max: uint64(n)}
	}
	return nil
}

func (unknownSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// costMessage is the message kube gives a CRD validation rule over budget
// (apiextensions' getCostErrorMessage).
func costMessage(costName string, cost, limit uint64) string {
	factor := float64(cost) / float64(limit)
	var f string
	switch {
	case factor > 100:
		f = "more than 100x"
	case factor < 1.5:
		f = fmt.Sprintf("%fx", factor)
	default:
		f = fmt.Sprintf("%.1fx", factor)
	}
	return fmt.Sprintf("%s exceeds budget by factor of %s (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)", costName, f)
}
