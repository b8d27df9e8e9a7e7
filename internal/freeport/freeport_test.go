package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestOnIsBelowTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		addr, err := On("127.0.0.1", true, func(a string) bool { return seen[a] })
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < lowest || port >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, ephemeralLow())
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}

func TestOnSkipsTakenPorts(t *testing.T) {
	if _, err := On("127.0.0.1", false, func(string) bool { return true }); err == nil {
		t.Fatal("every port taken, yet one was returned")
	}
}
