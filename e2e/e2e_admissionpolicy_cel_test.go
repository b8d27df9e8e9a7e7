package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// celRows are the CEL library functions the specification lists, one row
// per function, each an expression that holds. They are the validations of
// one policy: a create that passes it shows every row evaluated to true on
// a real node, through kube's plugin and libraries; a row that failed
// would refuse it with the row's name.
var celRows = []struct{ name, expr string }{
	// Extended strings.
	{"charAt", "'abc'.charAt(1) == 'b'"},
	{"indexOf", "'abcabc'.indexOf('c') == 2 && 'abcabc'.indexOf('c', 3) == 5"},
	{"lastIndexOf", "'abcabc'.lastIndexOf('b') == 4"},
	{"lowerAscii", "'HeLLo'.lowerAscii() == 'hello'"},
	{"upperAscii", "'HeLLo'.upperAscii() == 'HELLO'"},
	{"replace", "'a-b-c'.replace('-', '.') == 'a.b.c' && 'a-b-c'.replace('-', '.', 1) == 'a.b-c'"},
	{"split", "'a,b,c'.split(',') == ['a', 'b', 'c']"},
	{"substring", "'abcdef'.substring(2) == 'cdef' && 'abcdef'.substring(1, 3) == 'bc'"},
	{"trim", "'  x  '.trim() == 'x'"},
	// join is not a row: kube's cost estimator prices it beyond the
	// per-expression budget even on a literal list, so a policy using it
	// is refused at create (as it would be by kube-apiserver's validation,
	// which is the one run here).
	// Lists.
	{"isSorted", "[1, 2, 3].isSorted()"},
	{"sum", "[1, 2, 3].sum() == 6"},
	{"min", "[3, 1, 2].min() == 1"},
	{"max", "[3, 1, 2].max() == 3"},
	{"list indexOf", "[1, 2, 3].indexOf(2) == 1"},
	{"list lastIndexOf", "[1, 2, 2].lastIndexOf(2) == 2"},
	// Regular expressions.
	{"matches", "'abc123'.matches('^[a-z]+[0-9]+$')"},
	{"find", "'abc123'.find('[0-9]+') == '123' && 'abc'.find('[0-9]+') == ''"},
	{"findAll", "'a1b2c3'.findAll('[0-9]') == ['1', '2', '3'] && 'a1b2c3'.findAll('[0-9]', 2) == ['1', '2']"},
	// URLs.
	{"isURL", "isURL('https://example.com/x') && !isURL('not a url')"},
	{"url getScheme", "url('https://example.com:8443/p?a=1').getScheme() == 'https'"},
	{"url getHost", "url('https://example.com:8443/p').getHost() == 'example.com:8443'"},
	{"url getHostname", "url('https://example.com:8443/p').getHostname() == 'example.com'"},
	{"url getPort", "url('https://example.com:8443/p').getPort() == '8443'"},
	{"url getEscapedPath", "url('https://example.com/a%20b').getEscapedPath() == '/a%20b'"},
	{"url getQuery", "url('https://example.com/?a=1&a=2').getQuery() == {'a': ['1', '2']}"},
	// Quantities.
	{"isQuantity", "isQuantity('1.5Gi') && !isQuantity('1.5GB')"},
	{"quantity compareTo", "quantity('1Gi').compareTo(quantity('1024Mi')) == 0"},
	{"quantity isGreaterThan", "quantity('2').isGreaterThan(quantity('1500m'))"},
	{"quantity isLessThan", "quantity('500m').isLessThan(quantity('1'))"},
	{"quantity add", "quantity('500m').add(quantity('500m')) == quantity('1') && quantity('1').add(2) == quantity('3')"},
	{"quantity sub", "quantity('1').sub(quantity('250m')) == quantity('750m')"},
	{"quantity asInteger", "quantity('2k').asInteger() == 2000"},
	{"quantity isInteger", "quantity('2k').isInteger() && !quantity('1.5').isInteger()"},
	{"quantity asApproximateFloat", "quantity('1.5').asApproximateFloat() == 1.5"},
	// Numbers of different types compare.
	{"int and double", "1 < 1.5 && 3.0 >= 3"},
	{"uint and int", "2u > 1 && 1 < 2u"},
	// Macros.
	{"exists_one", "[1, 2, 3].exists_one(x, x > 2) && ![1, 2, 3].exists_one(x, x > 1)"},
	{"map", "[1, 2].map(x, x * 2) == [2, 4] && [1, 2, 3].map(x, x > 1, x * 10) == [20, 30]"},
	{"filter", "[1, 2, 3].filter(x, x > 1) == [2, 3]"},
	{"all and exists", "[1, 2].all(x, x > 0) && [1, 2].exists(x, x == 2)"},
	// The authorizer, as the requester (system:masters) and as others.
	{"authorizer resource", "authorizer.group('').resource('secrets').namespace('default').check('get').allowed()"},
	{"authorizer path", "authorizer.path('/healthz').check('get').allowed()"},
	{"authorizer serviceAccount", "!authorizer.serviceAccount('default', 'nobody').group('').resource('secrets').namespace('default').check('get').allowed()"},
	{"authorizer reason", "authorizer.serviceAccount('kube-system', 'namespace-controller').group('').resource('namespaces').check('list').reason().startsWith('RBAC: allowed by ClusterRoleBinding')"},
	{"authorizer errored", "!authorizer.group('').resource('pods').check('list').errored()"},
	{"authorizer selectors", "authorizer.group('').resource('pods').namespace('default').fieldSelector('spec.nodeName=n1').labelSelector('app=x').check('list').allowed()"},
	// IPs and CIDRs.
	{"ip", "isIP('10.0.0.1') && ip('10.0.0.1').family() == 4 && ip('::1').isLoopback()"},
	{"cidr", "isCIDR('10.0.0.0/8') && cidr('10.0.0.0/8').containsIP(ip('10.1.2.3')) && cidr('10.0.0.0/8').prefixLength() == 8"},
	// Named formats.
	{"format", "!format.dns1123Label().validate('ok').hasValue() && format.dns1123Label().validate('Not_OK').hasValue()"},
	// Sets.
	{"sets", "sets.contains([1, 2, 3], [1, 2]) && sets.intersects([1], [1, 9]) && sets.equivalent([1, 2], [2, 1])"},
}

// TestE2EAdmissionPolicyCELLibraries: every row of celRows holds on a real
// node. The policy also refuses ServiceAccounts labelled deny, which shows
// it is enforced before the create that must pass.
func TestE2EAdmissionPolicyCELLibraries(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	admin := n.clientset()
	const ns = "e2e-vap-cel"
	createNamespace(t, admin, ns)
	p := saPolicy("e2e-cel-rows", admissionregistrationv1.Validation{
		Expression: "!has(object.metadata.labels) || !('deny' in object.metadata.labels)", Message: "labelled deny",
	})
	for _, r := range celRows {
		p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: r.expr, Message: "row " + r.name})
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a policy with every row: %v", err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, bind("e2e-cel-rows", "e2e-cel-rows", ns, admissionregistrationv1.Deny), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := func(name string, labels map[string]string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	waitFor(t, 30*time.Second, "the policy to be enforced", func() bool {
		_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa("probe", map[string]string{"deny": "yes"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "labelled deny")
	})
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa("every-row", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a row did not hold: %v", err)
	}
}
