package failpoint

import (
	"fmt"
	"syscall"
)

// Sentinel errors.
var (
	// ErrDiskFull is returned (wrapped) by every write the disk-full
	// failpoints refuse. It wraps syscall.ENOSPC, so code that recognises
	// a real full disk recognises this one too. Nothing of the write was
	// stored.
	ErrDiskFull = fmt.Errorf("failpoint disk-full: %w", syscall.ENOSPC)
)
