package connlimit

import "time"

// Clock is the time source of a Limiter. AfterFunc must run f outside any
// lock of the clock's own, because f may call the clock again.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels the call if it has not started; it reports whether it
	// did.
	Stop() bool
}

// realClock is the time package.
type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
