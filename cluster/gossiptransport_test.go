package cluster

import (
	"io"
	"log"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestGossipTransportDialsFromItsBindIP: memberlist's TCP dials (push/pull,
// fallback pings) start from the gossip bind IP, and the kernel-chosen
// port is written back into the config as memberlist itself does.
func TestGossipTransportDialsFromItsBindIP(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	mc := memberlist.DefaultLANConfig()
	mc.BindAddr, mc.BindPort = "127.0.0.12", 0
	bt, err := newBoundTransport(mc, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer bt.Shutdown()
	if mc.BindPort == 0 || mc.AdvertisePort != mc.BindPort {
		t.Fatalf("the bound port was not written back: BindPort %d, AdvertisePort %d", mc.BindPort, mc.AdvertisePort)
	}
	for _, dial := range []func() (net.Conn, error){
		func() (net.Conn, error) { return bt.DialTimeout(peer.Addr().String(), 5*time.Second) },
		func() (net.Conn, error) {
			return bt.DialAddressTimeout(memberlist.Address{Addr: peer.Addr().String(), Name: "n2"}, 5*time.Second)
		},
	} {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		_ = peer.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		a, err := peer.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := a.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.12" {
			t.Fatalf("gossip bound on 127.0.0.12 dialled from %s", got)
		}
		a.Close()
	}
}
