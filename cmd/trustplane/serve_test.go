package main

import (
	"flag"
	"net"
	"testing"
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
	r := servingRequest("node-a", "0.0.0.0", net.ParseIP("10.96.0.1"))
	dns := map[string]bool{}
	for _, d := range r.DNSNames {
		dns[d] = true
	}
	for _, want := range []string{"localhost", "node-a", "kubernetes.default.svc"} {
		if !dns[want] {
			t.Errorf("serving certificate lacks DNS name %s: %v", want, r.DNSNames)
		}
	}
	for _, ip := range r.IPAddresses {
		if ip.IsUnspecified() {
			t.Errorf("serving certificate carries the unspecified address %v", ip)
		}
	}
	if !r.Server || r.Client {
		t.Errorf("serving certificate usages: server=%v client=%v", r.Server, r.Client)
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
