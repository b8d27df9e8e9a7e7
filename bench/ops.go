package bench

import (
	"context"
	"fmt"
	"strconv"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

func encoding(c Config) string {
	if c.Protobuf {
		return "protobuf"
	}
	return "JSON"
}

var createWorkload = &workload{
	name: "create",
	detail: func(c Config) string {
		return fmt.Sprintf("create one %s (%s)", singular(c.CreateKind), encoding(c))
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := createOp(ctx, e, "c")
		return closedLoop{e, op}, err
	},
}

func singular(kind string) string {
	if kind == "serviceaccounts" {
		return "ServiceAccount"
	}
	return "ConfigMap"
}

// createOp creates one object of the configured kind per operation, named
// prefix-client-seq in the run's namespace.
func createOp(ctx context.Context, e *env, prefix string) (opFunc, error) {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return nil, err
	}
	ns := e.ns("")
	return func(ctx context.Context, client, seq int) error {
		name := fmt.Sprintf("%s-%d-%d", prefix, client, seq)
		meta := metav1.ObjectMeta{Name: name}
		var err error
		if e.cfg.CreateKind == "serviceaccounts" {
			_, err = e.client(client).CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
		} else {
			_, err = e.client(client).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		}
		return err
	}, nil
}

// applyObjects is how many ConfigMaps each client of the apply workload
// applies in turn: after the first pass every apply is an update.
const applyObjects = 10

var applyWorkload = &workload{
	name: "apply",
	detail: func(c Config) string {
		return fmt.Sprintf("server-side apply (force) of one of %d ConfigMaps per client, changing one value; the first pass creates them (%s)", applyObjects, encoding(c))
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := applyOp(ctx, e)
		return closedLoop{e, op}, err
	},
}

// applyOp applies a ConfigMap per operation as one field manager: the
// path kubectl apply --server-side and controllers take, with its
// managedFields bookkeeping on every write.
func applyOp(ctx context.Context, e *env) (opFunc, error) {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return nil, err
	}
	ns := e.ns("")
	return func(ctx context.Context, client, seq int) error {
		name := fmt.Sprintf("a-%d-%d", client, seq%applyObjects)
		cm := corev1ac.ConfigMap(name, ns).
			WithLabels(map[string]string{"app": "bench"}).
			WithData(map[string]string{"static": "v", "n": strconv.Itoa(seq)})
		_, err := e.client(client).CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "trustplane-bench", Force: true})
		return err
	}, nil
}

var getWorkload = &workload{
	name: "get",
	detail: func(c Config) string {
		return fmt.Sprintf("get one of %d ConfigMaps, resourceVersion unset (consistent read)", getObjects)
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := getOp(ctx, e, "")
		return closedLoop{e, op}, err
	},
}

var getRV0Workload = &workload{
	name: "get-rv0",
	detail: func(c Config) string {
		return fmt.Sprintf("get one of %d ConfigMaps with resourceVersion=0 (may be served from cache)", getObjects)
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := getOp(ctx, e, "0")
		return closedLoop{e, op}, err
	},
}

// getOp reads the get objects in turn at resourceVersion rv.
func getOp(ctx context.Context, e *env, rv string) (opFunc, error) {
	if err := e.ensureGetObjects(ctx); err != nil {
		return nil, err
	}
	ns := e.ns("")
	return func(ctx context.Context, client, seq int) error {
		_, err := e.client(client).CoreV1().ConfigMaps(ns).Get(ctx, getName(client+seq), metav1.GetOptions{ResourceVersion: rv})
		return err
	}, nil
}

var listWorkload = &workload{
	name: "list",
	detail: func(c Config) string {
		return fmt.Sprintf("list all %d ConfigMaps of a namespace in one response (consistent)", c.ListSize)
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := listOp(ctx, e, 0, false)
		return closedLoop{e, op}, err
	},
}

var listPagedWorkload = &workload{
	name: "list-paged",
	detail: func(c Config) string {
		return fmt.Sprintf("list all %d ConfigMaps of a namespace in pages of limit=%d (all pages)", c.ListSize, c.ListPageSize)
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := listOp(ctx, e, e.cfg.ListPageSize, false)
		return closedLoop{e, op}, err
	},
}

// listOp lists the seeded namespace: in one response (limit 0), page by
// page with limit, or (firstPageOnly) just the first page. A full list
// must hold every seeded object.
func listOp(ctx context.Context, e *env, limit int, firstPageOnly bool) (opFunc, error) {
	if err := e.ensureListObjects(ctx); err != nil {
		return nil, err
	}
	ns := e.ns("list")
	maxPages := 1
	if limit > 0 {
		maxPages = e.cfg.ListSize/limit + 2
	}
	return func(ctx context.Context, client, seq int) error {
		cms := e.client(client).CoreV1().ConfigMaps(ns)
		opts := metav1.ListOptions{Limit: int64(limit)}
		items := 0
		for page := 0; ; page++ {
			if page == maxPages {
				return fmt.Errorf("list did not end after %d pages", maxPages)
			}
			l, err := cms.List(ctx, opts)
			if err != nil {
				return err
			}
			items += len(l.Items)
			if firstPageOnly {
				return nil
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if items < e.cfg.ListSize {
			return fmt.Errorf("%w: %d items, %d seeded", errShortList, items, e.cfg.ListSize)
		}
		return nil
	}, nil
}

var tokenReviewWorkload = &workload{
	name: "tokenreview",
	detail: func(Config) string {
		return "review one ServiceAccount token (minted once with TokenRequest)"
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := tokenReviewOp(ctx, e)
		return closedLoop{e, op}, err
	},
}

func tokenReviewOp(ctx context.Context, e *env) (opFunc, error) {
	if err := e.ensureToken(ctx); err != nil {
		return nil, err
	}
	token := e.token
	return func(ctx context.Context, client, seq int) error {
		tr, err := e.client(client).AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !tr.Status.Authenticated {
			return fmt.Errorf("%w: %s", errNotAuthenticated, tr.Status.Error)
		}
		return nil
	}, nil
}

var csrWorkload = &workload{
	name: "csr",
	detail: func(Config) string {
		return "issue one kube-apiserver-client certificate: create the CSR, approve it, wait for status.certificate"
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		is, err := newCSRIssuer(ctx, e, "c")
		if err != nil {
			return nil, err
		}
		return closedLoop{e, is.issue}, nil
	},
}
