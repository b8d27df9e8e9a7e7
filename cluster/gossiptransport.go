package cluster

import (
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trustplane/trustplane/dialsrc"
)

// boundTransport is memberlist's NetTransport whose TCP dials (push/pull
// state sync, the TCP fallback ping) start from the gossip bind IP, under
// dialsrc's rule. UDP needs nothing: it is sent from the bound socket.
type boundTransport struct {
	*memberlist.NetTransport
	bind string // the gossip bind host
}

var _ memberlist.NodeAwareTransport = (*boundTransport)(nil)

// DialTimeout overrides NetTransport's, which dials with no local address.
func (t *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if la := dialsrc.LocalAddr(t.bind, addr); la != nil {
		d.LocalAddr = la
	}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout is DialTimeout for memberlist's node-aware callers.
func (t *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// newBoundTransport does what memberlist.Create does when Config.Transport
// is nil (including its retries when the port is chosen by the kernel, and
// writing that port back into mc), but returns a boundTransport.
func newBoundTransport(mc *memberlist.Config, logger *log.Logger) (*boundTransport, error) {
	nc := &memberlist.NetTransportConfig{
		BindAddrs:    []string{mc.BindAddr},
		BindPort:     mc.BindPort,
		Logger:       logger,
		MetricLabels: mc.MetricLabels,
	}
	limit := 1
	if mc.BindPort == 0 {
		// Binding TCP and UDP to one kernel-chosen port races other
		// processes; memberlist retries the same way.
		limit = 10
	}
	var err error
	for range limit {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			if mc.BindPort == 0 {
				mc.BindPort = nt.GetAutoBindPort()
				mc.AdvertisePort = mc.BindPort
			}
			return &boundTransport{NetTransport: nt, bind: mc.BindAddr}, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip transport on %s: %w", net.JoinHostPort(mc.BindAddr, fmt.Sprint(mc.BindPort)), err)
}
