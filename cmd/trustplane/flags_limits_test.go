package main

import (
	"testing"
	"time"
)

func TestLimitFlags(t *testing.T) {
	t.Run("defaults are kube-apiserver's and etcd's", func(t *testing.T) {
		o, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		l := o.limits
		if l.maxRequestsInFlight != 400 || l.maxMutatingRequestsInFlight != 200 || l.requestTimeout != time.Minute ||
			l.maxObjectBytes != 1572864 {
			t.Fatalf("defaults %+v", l)
		}
	})
	t.Run("byte flags take quantities", func(t *testing.T) {
		o, err := parseServe([]string{"--max-object-bytes", "64Ki", "--watch-cache-max-bytes", "1Gi", "--compact-max-bytes", "-1"})
		if err != nil {
			t.Fatal(err)
		}
		if o.limits.maxObjectBytes != 64<<10 || o.limits.watchCacheMaxBytes != 1<<30 || o.limits.compactMaxBytes != -1 {
			t.Fatalf("parsed %+v", o.limits)
		}
	})
	t.Run("every limit has an environment twin", func(t *testing.T) {
		t.Setenv("TRUSTPLANE_MAX_MUTATING_REQUESTS_INFLIGHT", "7")
		t.Setenv("TRUSTPLANE_MAX_OBJECT_BYTES", "1Mi")
		o, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		if o.limits.maxMutatingRequestsInFlight != 7 || o.limits.maxObjectBytes != 1<<20 {
			t.Fatalf("parsed %+v", o.limits)
		}
	})
	for _, bad := range [][]string{
		{"--max-requests-inflight", "-1"},
		{"--max-object-bytes", "lots"},
		{"--tls-handshake-timeout", "0s"},
		{"--compact-max-bytes", "0"},
	} {
		t.Run("refuses "+bad[0]+" "+bad[1], func(t *testing.T) {
			if _, err := parseServe(bad); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
