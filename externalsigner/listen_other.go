//go:build !unix

package externalsigner

import (
	"net"
	"os"
)

// listenPrivate listens on the unix socket path and makes it 0600.
func listenPrivate(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
