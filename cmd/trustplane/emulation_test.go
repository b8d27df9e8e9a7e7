package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

// TestEmulatedVersion checks --emulated-version's syntax and range, which
// are kube's (binary-3 to binary, never below 1.31), without touching the
// process-wide registry.
func TestEmulatedVersion(t *testing.T) {
	cases := []struct {
		flag string
		want *version.Version // nil: refused
	}{
		{"", version.MajorMinor(1, 33)},
		{"1.33", version.MajorMinor(1, 33)},
		{"1.32", version.MajorMinor(1, 32)},
		{"kube=1.31", version.MajorMinor(1, 31)},
		{"1.30", nil},
		{"1.34", nil},
		{"wardle=1.32", nil},
		{"one.two", nil},
	}
	for _, c := range cases {
		got, err := checkEmulatedVersion(c.flag)
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%q: accepted as %v", c.flag, got)
		case c.want != nil && err != nil:
			t.Errorf("%q: %v", c.flag, err)
		case c.want != nil && !got.EqualTo(c.want):
			t.Errorf("%q: emulates %v, want %v", c.flag, got, c.want)
		}
	}
	if got := emulatedVersion(); !got.EqualTo(version.MajorMinor(1, 33)) {
		t.Errorf("checking changed the process-wide release to %v", got)
	}
}
