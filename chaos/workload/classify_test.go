package workload

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestOutcome(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	unavailable := apierrors.NewServiceUnavailable("not now")
	unavailable.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	for _, tc := range []struct {
		name string
		err  error
		want history.Outcome
		code int
	}{
		{"success", nil, history.OK, 0},
		{"conflict", apierrors.NewConflict(gr, "k", errors.New("changed")), history.Fail, 409},
		{"already exists", apierrors.NewAlreadyExists(gr, "k"), history.Fail, 409},
		{"not found", apierrors.NewNotFound(gr, "k"), history.Fail, 404},
		{"invalid", apierrors.NewBadRequest("no"), history.Fail, 400},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), history.Fail, 429},
		// The server's contract: 503 with Retry-After was not processed.
		{"503 with Retry-After", unavailable, history.Fail, 503},
		// Without Retry-After a 503 promises nothing.
		{"503 without Retry-After", apierrors.NewServiceUnavailable("?"), history.Unknown, 503},
		{"504: may have been applied", apierrors.NewTimeoutError("slow", 0), history.Unknown, 504},
		{"500", apierrors.NewInternalError(errors.New("boom")), history.Unknown, 500},
		{"connection refused: never sent", &url.Error{Op: "Post", URL: "https://x", Err: fmt.Errorf("dial: %w", syscall.ECONNREFUSED)}, history.Fail, 0},
		{"connection reset: maybe sent", &url.Error{Op: "Post", URL: "https://x", Err: syscall.ECONNRESET}, history.Unknown, 0},
		{"client timeout", fmt.Errorf("wrapped: %w", context.DeadlineExceeded), history.Unknown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, code, _ := outcome(tc.err)
			if got != tc.want || code != tc.code {
				t.Errorf("outcome(%v) = %s %d, want %s %d", tc.err, got, code, tc.want, tc.code)
			}
		})
	}
}
