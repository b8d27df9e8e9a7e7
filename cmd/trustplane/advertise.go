package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// advertiseFlags are the addresses a node gives its peers and clients when
// they differ from what it binds: a node that listens on 0.0.0.0 must still
// tell the others an address they can reach, or its followers would
// forward writes to 127.0.0.1, that is, to themselves.
type advertiseFlags struct {
	address string // --advertise-address: host for the API, and for Raft and gossip bound to every interface
	raft    string // --raft-advertise-addr host:port
	gossip  string // --gossip-advertise-addr ip:port
}

func (a *advertiseFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.address, "advertise-address", "", "address (IP or DNS name) peers and clients reach this node at; also the Raft and gossip host when those listen on every interface (kube-apiserver's --advertise-address)")
	fs.StringVar(&a.raft, "raft-advertise-addr", "", "host:port peers dial for this node's Raft (default: --raft-addr, or --advertise-address with its port)")
	fs.StringVar(&a.gossip, "gossip-advertise-addr", "", "IP:port peers reach this node's gossip at (default: --gossip-addr, or --advertise-address with its port)")
}

// addresses are a node's resolved bind and advertise addresses.
type addresses struct {
	api, raft, gossip string // advertised host:port; "" where the bind address is advertised as is
}

// resolve works out the advertised addresses from the bind addresses. In a
// multi-node cluster an address that binds every interface must have an
// advertised twin: guessing loopback is the bug this exists to prevent.
func (a *advertiseFlags) resolve(listen, raftAddr, gossipAddr string, multiNode bool) (addresses, error) {
	var out addresses
	if a.address != "" {
		if unspecified(a.address) {
			return out, fmt.Errorf("--advertise-address %q: must be an address peers can reach", a.address)
		}
	}
	pick := func(flagName, explicit, bind string) (string, error) {
		if explicit != "" {
			host, port, err := net.SplitHostPort(explicit)
			if err != nil {
				return "", fmt.Errorf("%s %q: %w", flagName, explicit, err)
			}
			if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || host == "" || unspecified(host) {
				return "", fmt.Errorf("%s %q: want host:port that peers can reach", flagName, explicit)
			}
			return explicit, nil
		}
		host, port, err := net.SplitHostPort(bind)
		if err != nil {
			return "", err
		}
		if host != "" && !unspecified(host) {
			return "", nil
		}
		if a.address != "" {
			return net.JoinHostPort(a.address, port), nil
		}
		if multiNode {
			return "", fmt.Errorf("%s binds every interface (%s); set --advertise-address (or %s) to the address peers reach this node at", flagName, bind, flagName)
		}
		return "", nil
	}
	var err error
	if out.raft, err = pick("--raft-advertise-addr", a.raft, raftAddr); err != nil {
		return out, err
	}
	if multiNode {
		if out.gossip, err = pick("--gossip-advertise-addr", a.gossip, gossipAddr); err != nil {
			return out, err
		}
		if out.gossip != "" && net.ParseIP(hostOf(out.gossip)) == nil {
			return out, fmt.Errorf("gossip is advertised at %q: memberlist needs an IP address; set --gossip-advertise-addr", out.gossip)
		}
	}
	_, listenPort, err := net.SplitHostPort(listen)
	if err != nil {
		return out, fmt.Errorf("--listen: %w", err)
	}
	switch {
	case a.address != "":
		out.api = net.JoinHostPort(a.address, listenPort)
	case unspecified(hostOf(listen)) && multiNode:
		return out, fmt.Errorf("--listen %s binds every interface; set --advertise-address so that followers can forward writes to this node", listen)
	default:
		out.api = advertised(listen)
	}
	return out, nil
}

func unspecified(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// advertised is the address peers use for this node's API: the listen
// address, with an unspecified host replaced by loopback.
func advertised(listen string) string {
	return strings.TrimPrefix(apiURL(listen, hostOf(listen)), "https://")
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// readGossipKey reads <ca-dir>/gossip.key (trustplane certs init writes it).
func readGossipKey(caDir string) ([]byte, error) {
	if _, err := os.Stat(filepath.Join(caDir, gossipKeyFile)); err != nil {
		return nil, fmt.Errorf("gossip key (create it with trustplane certs init --dir %s): %w", caDir, err)
	}
	return parseGossipKeyFile(filepath.Join(caDir, gossipKeyFile))
}

// parseGossipKeyFile reads a gossip key file: base64 of 32 bytes. Its
// errors never quote the file's contents.
func parseGossipKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("gossip key %s: want base64 of 32 bytes", path)
	}
	return key, nil
}
