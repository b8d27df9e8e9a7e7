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
