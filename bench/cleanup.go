package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cleanupPoll is how often cleanup checks whether a namespace has gone.
const cleanupPoll = 250 * time.Millisecond

// cleanup deletes the run's CSRs (by RunLabel) and namespaces, then waits,
// up to CleanupTimeout, until the namespaces have gone. It runs on its own
// context, so an interrupted run still cleans up. A delete that fails is
// an ErrCleanup naming what is left; a namespace still terminating at the
// timeout is only reported, since the server finishes it by itself.
func cleanup(e *env) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CleanupTimeout)
	defer cancel()
	cs := e.client(0)
	var left []string
	sel := RunLabel + "=" + e.runID
	if err := cs.CertificatesV1().CertificateSigningRequests().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		left = append(left, fmt.Sprintf("CSRs labelled %s (%v)", sel, err))
	}
	namespaces, err := e.runNamespaces(ctx)
	if err != nil {
		left = append(left, fmt.Sprintf("namespaces labelled %s (%v)", sel, err))
	}
	for _, ns := range namespaces {
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("namespace %s (%v)", ns, err))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%w: delete by hand: %s", ErrCleanup, strings.Join(left, "; "))
	}
	if len(namespaces) > 0 {
		e.prog.logf("cleanup: deleting namespaces %s", strings.Join(namespaces, ", "))
	}
	for _, ns := range namespaces {
		for {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				e.prog.logf("cleanup: namespace %s is still being deleted after %s; the server finishes it by itself", ns, e.cfg.CleanupTimeout)
				break
			}
			time.Sleep(cleanupPoll)
		}
	}
	return nil
}

// runNamespaces lists the namespaces this run created, and those labelled
// with its id (a create whose answer was lost may still have created one).
func (e *env) runNamespaces(ctx context.Context) ([]string, error) {
	out := e.created()
	l, err := e.client(0).CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=" + e.runID})
	if err != nil {
		return out, err
	}
	for _, ns := range l.Items {
		if !slices.Contains(out, ns.Name) {
			out = append(out, ns.Name)
		}
	}
	return out, nil
}
