package bench

import "errors"

// The errors a run can end with. Each is wrapped with details; test with
// errors.Is.
var (
	// ErrConfig: the configuration is invalid; nothing was contacted.
	ErrConfig = errors.New("bench: invalid configuration")
	// ErrUnreachable: a kubeconfig could not be loaded or its server did
	// not answer /version; nothing was created.
	ErrUnreachable = errors.New("bench: server unreachable")
	// ErrWorkloadFailed: at least one workload had no successful
	// operation (its preparation failed, or every operation did). The
	// result is still complete and reports the errors.
	ErrWorkloadFailed = errors.New("bench: workload failed")
	// ErrCleanup: something the run created could not be deleted; the
	// message names it so that an operator can delete it by hand.
	ErrCleanup = errors.New("bench: cleanup failed")
	// ErrResultFormat: a result file is not a bench result.
	ErrResultFormat = errors.New("bench: not a bench result")
)

// What a single operation can fail with, besides the server's own errors.
// Each counts as one error of its workload (errMissingDeliveries as one
// per missing delivery).
var (
	// errShortList: a list returned fewer objects than were seeded.
	errShortList = errors.New("list returned fewer objects than seeded")
	// errNotAuthenticated: a TokenReview did not authenticate the valid
	// token the run minted.
	errNotAuthenticated = errors.New("TokenReview did not authenticate the token")
	// errCSRRefused: the CSR was denied or failed instead of being issued.
	errCSRRefused = errors.New("CSR denied or failed")
	// errMissingDeliveries: events the watchers had not received when the
	// wait after the last write ended.
	errMissingDeliveries = errors.New("deliveries missing after the last write")
)
