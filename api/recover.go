package api

import (
	"fmt"
	"log/slog"
	"runtime/debug"
)

// goRecovering runs fn on a goroutine of its own that no panic can take
// the process down from: the panic is logged with its stack and ends only
// that goroutine, as withRecovery ends only the request. net/http recovers
// a handler's own goroutine and nothing else, so every goroutine the
// request path starts goes through here.
func goRecovering(log *slog.Logger, what string, fn func()) {
	go func() {
		defer func() {
			if p := recover(); p != nil {
				if log == nil {
					log = slog.Default()
				}
				log.Error("panic in a request's goroutine", "goroutine", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}()
		fn()
	}()
}
