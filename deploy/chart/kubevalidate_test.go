package chart

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/batch"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	batchvalidation "k8s.io/kubernetes/pkg/apis/batch/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/networking"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	networkingvalidation "k8s.io/kubernetes/pkg/apis/networking/validation"
	"k8s.io/kubernetes/pkg/apis/policy"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	policyvalidation "k8s.io/kubernetes/pkg/apis/policy/validation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
)

// toInternal applies kube's defaults to the versioned obj and converts it
// to the internal type into, as the API server does before validating.
func toInternal(t *testing.T, obj runtime.Object, into runtime.Object) {
	t.Helper()
	legacyscheme.Scheme.Default(obj)
	if err := legacyscheme.Scheme.Convert(obj, into, nil); err != nil {
		t.Fatalf("converting %T to %T: %v", obj, into, err)
	}
}

// kubeValidate decodes m strictly into its k8s.io/api type and validates
// it with kube-apiserver's validation for a create. It returns the decoded
// versioned object for the chart's own checks. A kind this function does
// not know fails the test, except the ServiceMonitor (a CRD; checked by
// the chart rules).
func kubeValidate(t *testing.T, m manifest) any {
	t.Helper()
	var errs field.ErrorList
	var versioned any
	switch m.Kind {
	case "StatefulSet":
		v := &appsv1.StatefulSet{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &apps.StatefulSet{}
		toInternal(t, v, in)
		opts := podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil)
		errs = appsvalidation.ValidateStatefulSet(in, opts)
		// kube validates a StatefulSet's pod template only when the
		// controller creates the pods: validate those, and their claims.
		for i := range int(in.Spec.Replicas) {
			pod, claims := statefulSetPod(in, i)
			errs = append(errs, corevalidation.ValidatePodCreate(pod, opts)...)
			for _, c := range claims {
				errs = append(errs, corevalidation.ValidatePersistentVolumeClaim(c, corevalidation.ValidationOptionsForPersistentVolumeClaim(c, nil))...)
			}
		}
	case "Service":
		v := &corev1.Service{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &core.Service{}
		toInternal(t, v, in)
		allocateClusterIP(in)
		errs = corevalidation.ValidateService(in, nil)
	case "ServiceAccount":
		v := &corev1.ServiceAccount{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &core.ServiceAccount{}
		toInternal(t, v, in)
		errs = corevalidation.ValidateServiceAccount(in)
	case "ConfigMap":
		v := &corev1.ConfigMap{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &core.ConfigMap{}
		toInternal(t, v, in)
		errs = corevalidation.ValidateConfigMap(in)
	case "Secret":
		v := &corev1.Secret{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &core.Secret{}
		toInternal(t, v, in)
		errs = corevalidation.ValidateSecret(in)
	case "PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &policy.PodDisruptionBudget{}
		toInternal(t, v, in)
		errs = policyvalidation.ValidatePodDisruptionBudget(in, policyvalidation.PodDisruptionBudgetValidationOptions{})
	case "Job":
		v := &batchv1.Job{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &batch.Job{}
		toInternal(t, v, in)
		generateJobSelector(in)
		opts := batchvalidation.JobValidationOptions{
			PodValidationOptions:  podutil.GetValidationOptionsFromPodTemplate(&in.Spec.Template, nil),
			RequirePrefixedLabels: true,
		}
		errs = batchvalidation.ValidateJob(in, opts)
	case "Role":
		v := &rbacv1.Role{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &rbac.Role{}
		toInternal(t, v, in)
		errs = rbacvalidation.ValidateRole(in)
	case "RoleBinding":
		v := &rbacv1.RoleBinding{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &rbac.RoleBinding{}
		toInternal(t, v, in)
		errs = rbacvalidation.ValidateRoleBinding(in)
	case "NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		decodeStrict(t, m, v)
		versioned = v.DeepCopy()
		in := &networking.NetworkPolicy{}
		toInternal(t, v, in)
		errs = networkingvalidation.ValidateNetworkPolicy(in, networkingvalidation.NetworkPolicyValidationOptions{})
	case "ServiceMonitor":
		return nil
	default:
		t.Fatalf("%s: the test validates no %s; add it to kubeValidate", m, m.Kind)
	}
	if len(errs) > 0 {
		t.Fatalf("%s fails kube's validation:\n%v\n%s", m, errs.ToAggregate(), m.YAML)
	}
	return versioned
}

// statefulSetPod is pod i as the StatefulSet controller creates it: the
// template with its name, hostname and subdomain, and one PVC volume per
// claim template; and those claims.
func statefulSetPod(ss *apps.StatefulSet, i int) (*core.Pod, []*core.PersistentVolumeClaim) {
	name := fmt.Sprintf("%s-%d", ss.Name, i)
	pod := &core.Pod{
		ObjectMeta: *ss.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *ss.Spec.Template.Spec.DeepCopy(),
	}
	pod.Name, pod.Namespace = name, ss.Namespace
	pod.Spec.Hostname, pod.Spec.Subdomain = name, ss.Spec.ServiceName
	var claims []*core.PersistentVolumeClaim
	for _, t := range ss.Spec.VolumeClaimTemplates {
		c := t.DeepCopy()
		c.Name, c.Namespace = t.Name+"-"+name, ss.Namespace
		claims = append(claims, c)
		pod.Spec.Volumes = append(pod.Spec.Volumes, core.Volume{
			Name:         t.Name,
			VolumeSource: core.VolumeSource{PersistentVolumeClaim: &core.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}},
		})
	}
	return pod, claims
}

// allocateClusterIP does what the Service REST storage does before it
// validates a create: a ClusterIP Service gets an address, and every
// Service single-stack IPv4 families.
func allocateClusterIP(s *core.Service) {
	if s.Spec.Type != core.ServiceTypeClusterIP {
		return
	}
	if s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = "10.96.0.10"
	}
	s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
	single := core.IPFamilyPolicySingleStack
	s.Spec.IPFamilyPolicy = &single
	s.Spec.IPFamilies = []core.IPFamily{core.IPv4Protocol}
}

// generateJobSelector does what the Job strategy's PrepareForCreate does:
// a uid, and (unless the selector is manual) the generated selector and
// the labels it selects on.
func generateJobSelector(j *batch.Job) {
	j.UID = types.UID("00000000-0000-0000-0000-000000000001")
	if j.Spec.ManualSelector != nil && *j.Spec.ManualSelector {
		return
	}
	manual := false
	j.Spec.ManualSelector = &manual
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	for _, l := range []string{batch.LegacyJobNameLabel, batch.JobNameLabel} {
		if _, ok := j.Spec.Template.Labels[l]; !ok {
			j.Spec.Template.Labels[l] = j.Name
		}
	}
	for _, l := range []string{batch.LegacyControllerUidLabel, batch.ControllerUidLabel} {
		if _, ok := j.Spec.Template.Labels[l]; !ok {
			j.Spec.Template.Labels[l] = string(j.UID)
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, ok := j.Spec.Selector.MatchLabels[batch.ControllerUidLabel]; !ok {
		j.Spec.Selector.MatchLabels[batch.ControllerUidLabel] = string(j.UID)
	}
}
