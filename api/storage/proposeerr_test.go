package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestProposeErrNeverInvitesARetryOfAnUnknownOutcome: client-go resends
// any answer with Retry-After, POST included, so only a write that was
// certainly not applied may carry it. One that may have been applied is a
// 504 that says so, without Retry-After.
func TestProposeErrNeverInvitesARetryOfAnUnknownOutcome(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		code       int32
		retryAfter bool
	}{
		{"not applied: 503 with Retry-After", errors.New("cluster: not the leader"), http.StatusServiceUnavailable, true},
		{"outcome unknown: 504 without Retry-After", fmt.Errorf("%w: leadership lost", ErrOutcomeUnknown), http.StatusGatewayTimeout, false},
		{"the request's deadline passed: 504 without Retry-After", context.DeadlineExceeded, http.StatusGatewayTimeout, false},
		{"the client went away: 504 without Retry-After", context.Canceled, http.StatusGatewayTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st apierrors.APIStatus
			if !errors.As(ProposeErr(tt.err), &st) {
				t.Fatalf("ProposeErr(%v) is not a Status", tt.err)
			}
			s := st.Status()
			hasRetry := s.Details != nil && s.Details.RetryAfterSeconds > 0
			if s.Code != tt.code || hasRetry != tt.retryAfter {
				t.Fatalf("ProposeErr(%v) = %d (Retry-After %v), want %d (Retry-After %v): %s", tt.err, s.Code, hasRetry, tt.code, tt.retryAfter, s.Message)
			}
		})
	}
}
