package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port handed out: above the registered services
// most machines run.
const lowest = 10000

// ErrNoPort: no free port was found in the attempts allowed.
var ErrNoPort = errors.New("freeport: no free port")

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768 elsewhere, Linux's default and below the
// IANA range).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil || n <= lowest+1000 {
		return 32768
	}
	return n
}

// On returns an address on ip whose port was free a moment ago for TCP
// and, with udp, for UDP too (gossip binds both), and is below the
// ephemeral range; taken reports addresses already handed out, to skip.
func On(ip string, udp bool, taken func(addr string) bool) (string, error) {
	high := ephemeralLow()
	for attempt := 0; attempt < 200; attempt++ {
		addr := net.JoinHostPort(ip, strconv.Itoa(lowest+rand.IntN(high-lowest)))
		if taken != nil && taken(addr) {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ok := true
		if udp {
			u, uerr := net.ListenPacket("udp", addr)
			if uerr != nil {
				ok = false
			} else {
				u.Close()
			}
		}
		l.Close()
		if ok {
			return addr, nil
		}
	}
	return "", fmt.Errorf("%w on %s", ErrNoPort, ip)
}
