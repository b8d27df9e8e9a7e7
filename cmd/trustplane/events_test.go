package main

import (
	"strings"
	"testing"
	"time"
)

func TestEventTTLFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want time.Duration
		err  string
	}{
		{"kube-apiserver's default is an hour", nil, time.Hour, ""},
		{"a TTL is taken in whole seconds, as kube's storage takes it", []string{"--event-ttl", "2500ms"}, 2 * time.Second, ""},
		{"0 keeps events", []string{"--event-ttl", "0"}, 0, ""},
		{"a negative TTL is refused", []string{"--event-ttl", "-1s"}, 0, "--event-ttl -1s: must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseServe(tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.events.ttl != tc.want {
				t.Fatalf("ttl %s, want %s", o.events.ttl, tc.want)
			}
			for _, r := range o.events.resources() {
				if r.TTL != tc.want {
					t.Fatalf("%s: TTL %s, want %s", r.GVR, r.TTL, tc.want)
				}
			}
		})
	}
}
