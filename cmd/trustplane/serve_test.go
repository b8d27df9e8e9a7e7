package main

import (
	"flag"
	"net"
	"slices"
	"testing"
	"time"
)

func TestFirstServiceIP(t *testing.T) {
	tests := []struct{ cidr, want string }{
		{"10.96.0.0/12", "10.96.0.1"},
		{"10.0.0.0/24", "10.0.0.1"},
		{"fd00::/108", "fd00::1"},
	}
	for _, tt := range tests {
		ip, err := firstServiceIP(tt.cidr)
		if err != nil || ip.String() != tt.want {
			t.Errorf("firstServiceIP(%s) = %v, %v; want %s", tt.cidr, ip, err, tt.want)
		}
	}
	for _, bad := range []string{"nonsense", "10.0.0.1/32"} {
		if _, err := firstServiceIP(bad); err == nil {
			t.Errorf("firstServiceIP(%s) accepted a range without host addresses", bad)
		}
	}
}

func TestAPIURLReplacesUnspecifiedHostWithLoopback(t *testing.T) {
	tests := []struct{ bound, host, want string }{
		{"127.0.0.1:6443", "127.0.0.1", "https://127.0.0.1:6443"},
		{"[::]:6443", "0.0.0.0", "https://127.0.0.1:6443"},
		{"10.0.0.5:7000", "node-a.example", "https://node-a.example:7000"},
	}
	for _, tt := range tests {
		if got := apiURL(tt.bound, tt.host); got != tt.want {
			t.Errorf("apiURL(%s, %s) = %s, want %s", tt.bound, tt.host, got, tt.want)
		}
	}
}

func TestServingCertificateCoversEveryName(t *testing.T) {
	r := servingRequest("node-a", net.ParseIP("10.96.0.1"), "0.0.0.0", "203.0.113.7")
	dns := map[string]bool{}
	for _, d := range r.DNSNames {
		dns[d] = true
	}
	for _, want := range []string{"localhost", "node-a", "kubernetes.default.svc"} {
		if !dns[want] {
			t.Errorf("serving certificate lacks DNS name %s: %v", want, r.DNSNames)
		}
	}
	advertisedIP := false
	for _, ip := range r.IPAddresses {
		if ip.IsUnspecified() {
			t.Errorf("serving certificate carries the unspecified address %v", ip)
		}
		advertisedIP = advertisedIP || ip.String() == "203.0.113.7"
	}
	if !advertisedIP {
		t.Errorf("serving certificate lacks the advertised address: %v", r.IPAddresses)
	}
	if !r.Server || r.Client {
		t.Errorf("serving certificate usages: server=%v client=%v", r.Server, r.Client)
	}
}

func TestServingCertificateCarriesTLSSANs(t *testing.T) {
	o, err := parseServe([]string{"--tls-san", "trustplane.ns.svc,trustplane-0.trustplane-headless.ns.svc.cluster.local,10.0.0.9"})
	if err != nil {
		t.Fatal(err)
	}
	r := servingRequest("n1", net.ParseIP("10.96.0.1"), splitList(o.tlsSANs)...)
	for _, want := range []string{"trustplane.ns.svc", "trustplane-0.trustplane-headless.ns.svc.cluster.local"} {
		if !slices.Contains(r.DNSNames, want) {
			t.Errorf("serving certificate lacks --tls-san DNS name %s: %v", want, r.DNSNames)
		}
	}
	if !slices.ContainsFunc(r.IPAddresses, net.ParseIP("10.0.0.9").Equal) {
		t.Errorf("serving certificate lacks --tls-san IP 10.0.0.9: %v", r.IPAddresses)
	}
}

func TestEnvTwinsFillFlagsNotGivenOnTheCommandLine(t *testing.T) {
	t.Setenv("TRUSTPLANE_DATA_DIR", "/from/env")
	t.Setenv("TRUSTPLANE_LISTEN", "127.0.0.1:1")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "default", "")
	listen := fs.String("listen", "default", "")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if err := envTwins(fs); err != nil {
		t.Fatal(err)
	}
	if *dataDir != "/from/env" {
		t.Errorf("data-dir = %s, want the environment's value", *dataDir)
	}
	if *listen != "127.0.0.1:2" {
		t.Errorf("listen = %s, want the command line's value over the environment's", *listen)
	}
}

func TestParseServe(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantExpect int
		wantErr    bool
	}{
		{"a lone node bootstraps itself", nil, 1, false},
		{"a node told to join an existing cluster does not bootstrap", []string{"--join", "10.0.0.1:6445"}, 0, false},
		{"an explicit expect with join is kept", []string{"--join", "10.0.0.1:6445", "--bootstrap-expect", "3"}, 3, false},
		{"a negative expect is refused", []string{"--bootstrap-expect", "-1"}, 0, true},
		{"a stray argument is refused", []string{"stray"}, 0, true},
		{"tls-san takes DNS names, wildcards and IPs", []string{"--tls-san", "trustplane.ns.svc, *.trustplane-headless.ns.svc,10.0.0.9,fd00::9"}, 1, false},
		{"tls-san refuses what is no SAN", []string{"--tls-san", "trustplane.ns.svc,not a name"}, 0, true},
		{"tls-san refuses a URL", []string{"--tls-san", "https://trustplane.example"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseServe(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && o.bootstrapExpect != tt.wantExpect {
				t.Fatalf("bootstrap-expect = %d, want %d", o.bootstrapExpect, tt.wantExpect)
			}
		})
	}
}

func TestAdvertisedAddresses(t *testing.T) {
	tests := []struct {
		name                 string
		flags                advertiseFlags
		listen, raft, gossip string
		multi                bool
		want                 addresses
		wantErr              bool
	}{
		{name: "loopback binds are advertised as they are", listen: "127.0.0.1:6443", raft: "127.0.0.1:6444", gossip: "127.0.0.1:6445", multi: true,
			want: addresses{api: "127.0.0.1:6443"}},
		{name: "--advertise-address covers every address bound to all interfaces", flags: advertiseFlags{address: "10.0.0.5"},
			listen: "0.0.0.0:6443", raft: "0.0.0.0:6444", gossip: "0.0.0.0:6445", multi: true,
			want: addresses{api: "10.0.0.5:6443", raft: "10.0.0.5:6444", gossip: "10.0.0.5:6445"}},
		{name: "explicit Raft and gossip addresses win", flags: advertiseFlags{address: "10.0.0.5", raft: "raft.example:7000", gossip: "10.0.0.6:7001"},
			listen: "0.0.0.0:6443", raft: "0.0.0.0:6444", gossip: "0.0.0.0:6445", multi: true,
			want: addresses{api: "10.0.0.5:6443", raft: "raft.example:7000", gossip: "10.0.0.6:7001"}},
		{name: "a specific bind keeps its own address", flags: advertiseFlags{address: "10.0.0.5"},
			listen: "0.0.0.0:6443", raft: "10.0.0.9:6444", gossip: "10.0.0.9:6445", multi: true,
			want: addresses{api: "10.0.0.5:6443"}},
		{name: "a cluster node bound to all interfaces needs an advertised API address",
			listen: "0.0.0.0:6443", raft: "127.0.0.1:6444", gossip: "127.0.0.1:6445", multi: true, wantErr: true},
		{name: "a cluster node with Raft on all interfaces needs an advertised Raft address",
			listen: "127.0.0.1:6443", raft: "0.0.0.0:6444", gossip: "127.0.0.1:6445", multi: true, wantErr: true},
		{name: "a one-node cluster may bind all interfaces", listen: "0.0.0.0:6443", raft: "127.0.0.1:6444", gossip: "0.0.0.0:6445",
			want: addresses{api: "127.0.0.1:6443"}},
		{name: "gossip must be advertised at an IP", flags: advertiseFlags{address: "node-a.example"},
			listen: "0.0.0.0:6443", raft: "0.0.0.0:6444", gossip: "0.0.0.0:6445", multi: true, wantErr: true},
		{name: "the advertised address cannot be unspecified", flags: advertiseFlags{address: "0.0.0.0"},
			listen: "127.0.0.1:6443", raft: "127.0.0.1:6444", gossip: "127.0.0.1:6445", multi: true, wantErr: true},
		{name: "an advertised Raft address needs a port", flags: advertiseFlags{raft: "10.0.0.5"},
			listen: "127.0.0.1:6443", raft: "0.0.0.0:6444", gossip: "127.0.0.1:6445", multi: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.flags.resolve(tt.listen, tt.raft, tt.gossip, tt.multi)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("resolve = %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("resolve = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// A SIGTERM'd node stays a voter unless told otherwise: the default of
// --leave-on-terminate is false, as for Consul servers.
func TestLeaveOnTerminateDefaultsToStaying(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.leaveOnTerminate {
		t.Fatal("--leave-on-terminate defaults to true; a SIGTERM'd node would leave")
	}
	t.Setenv("TRUSTPLANE_LEAVE_ON_TERMINATE", "true")
	if o, err = parseServe(nil); err != nil || !o.leaveOnTerminate {
		t.Fatalf("TRUSTPLANE_LEAVE_ON_TERMINATE=true: leaveOnTerminate=%v, err %v", o != nil && o.leaveOnTerminate, err)
	}
}

// TestHistoryDefaultsAreTheSpecifications: continue tokens (the MVCC
// history) and the watch history are kept 5 minutes by default, the
// specification's figure for both.
func TestHistoryDefaultsAreTheSpecifications(t *testing.T) {
	o, err := parseServe(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.compactRetention != 5*time.Minute || o.watchWindow != 5*time.Minute {
		t.Fatalf("--compact-retention %v, --watch-cache-window %v; want 5m each", o.compactRetention, o.watchWindow)
	}
}
