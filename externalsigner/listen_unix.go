//go:build unix

package externalsigner

import (
	"net"
	"syscall"
)

// listenPrivate listens on the unix socket path, created with mode 0600:
// the umask is narrowed around the bind, so no other user can connect in
// the moment before a chmod would apply. The umask is the process's; the
// sidecar binds once, as it starts.
func listenPrivate(path string) (net.Listener, error) {
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	return net.Listen("unix", path)
}
