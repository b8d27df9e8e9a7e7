package workload

import (
	"context"
	"errors"
	"net/http"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/trustplane/trustplane/chaos/history"
)

// outcome classifies a write's error by what it proves. The rule is the
// server's contract (docs/COMPATIBILITY.md): a 429 or 503 carrying
// Retry-After means "not processed", which is also why client-go retries
// them; a 504, a 500, or a transport error after the request left says
// nothing about whether the write happened.
func outcome(err error) (history.Outcome, int, string) {
	if err == nil {
		return history.OK, 0, ""
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		code := int(s.Code)
		reason := string(s.Reason)
		if reason == "" {
			reason = s.Message
		}
		switch {
		case code == http.StatusConflict, code == http.StatusNotFound, code == http.StatusUnprocessableEntity,
			code == http.StatusBadRequest, code == http.StatusForbidden, code == http.StatusUnauthorized,
			code == http.StatusMethodNotAllowed, code == http.StatusRequestEntityTooLarge:
			return history.Fail, code, reason
		case code == http.StatusTooManyRequests:
			return history.Fail, code, reason
		case code == http.StatusServiceUnavailable && s.Details != nil && s.Details.RetryAfterSeconds > 0:
			return history.Fail, code, reason
		}
		return history.Unknown, code, reason
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		// Nothing was sent: the connection was never made.
		return history.Fail, 0, "connection refused"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return history.Unknown, 0, "client timeout"
	}
	return history.Unknown, 0, err.Error()
}
