package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// getObjects is how many ConfigMaps the get workloads read in turn.
	getObjects = 100
	// seedPayload is the size of each seeded list object's data value.
	seedPayload = 256
	// seedAttempts bounds the tries of one seed create.
	seedAttempts = 3
	// reviewerSA is the ServiceAccount whose token is reviewed.
	reviewerSA = "bench-reviewer"
	// tokenSeconds is the requested validity of that token.
	tokenSeconds = 3600
)

// getName is the i-th object the get workloads read.
func getName(i int) string { return fmt.Sprintf("get-%03d", i%getObjects) }

// ensureGetObjects creates the ConfigMaps the get workloads read.
func (e *env) ensureGetObjects(ctx context.Context) error {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return err
	}
	return e.once("get-objects", func() error {
		return e.parallel(ctx, getObjects, func(i int) error {
			return e.createSeed(ctx, i, e.ns(""), getName(i), map[string]string{"k": "v"})
		})
	})
}

// listName is the i-th seeded list object.
func listName(i int) string { return fmt.Sprintf("l-%06d", i) }

// ensureListObjects seeds ListSize ConfigMaps in the list namespace.
func (e *env) ensureListObjects(ctx context.Context) error {
	if err := e.ensureNamespace(ctx, "list"); err != nil {
		return err
	}
	return e.once("list-objects", func() error {
		e.prog.logf("seeding %d ConfigMaps in %s", e.cfg.ListSize, e.ns("list"))
		data := map[string]string{"payload": strings.Repeat("x", seedPayload)}
		return e.parallel(ctx, e.cfg.ListSize, func(i int) error {
			return e.createSeed(ctx, i, e.ns("list"), listName(i), data)
		})
	})
}

// createSeed creates one ConfigMap through client i, retrying a few times
// on the next clients.
func (e *env) createSeed(ctx context.Context, i int, ns, name string, data map[string]string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	return e.retryCreate(ctx, i, "ConfigMap "+ns+"/"+name, func(ctx context.Context, client int) error {
		_, err := e.client(client).CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
}

// retryCreate runs create on client i, then on the next clients, up to
// seedAttempts times, each bounded by the request timeout; AlreadyExists
// after a retry means an earlier attempt landed.
func (e *env) retryCreate(ctx context.Context, i int, what string, create func(ctx context.Context, client int) error) error {
	var err error
	for attempt := 0; attempt < seedAttempts; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
		err = create(rctx, i+attempt)
		cancel()
		if err == nil || (attempt > 0 && apierrors.IsAlreadyExists(err)) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("creating %s: %w", what, err)
}

// parallel runs f(0..n-1) on the run's clients, one worker per client,
// and returns the first error (the others stop taking work).
func (e *env) parallel(ctx context.Context, n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(len(e.clients), n) {
		wg.Go(func() {
			for !failed.Load() && ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// ensureToken creates the reviewer ServiceAccount and mints its token
// with TokenRequest.
func (e *env) ensureToken(ctx context.Context) error {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return err
	}
	return e.once("token", func() error {
		sas := e.client(0).CoreV1().ServiceAccounts(e.ns(""))
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: reviewerSA}}
		if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ServiceAccount %s: %w", reviewerSA, err)
		}
		exp := int64(tokenSeconds)
		tr, err := sas.CreateToken(ctx, reviewerSA, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("TokenRequest for %s: %w", reviewerSA, err)
		}
		if tr.Status.Token == "" {
			return fmt.Errorf("TokenRequest for %s returned no token", reviewerSA)
		}
		e.token = tr.Status.Token
		return nil
	})
}
