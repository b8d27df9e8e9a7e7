package main

import (
	"flag"
	"testing"
)

// TestGCPercent: the flag, when given, wins; otherwise GOGC in the
// environment stays; otherwise the default applies.
func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantPct int
		wantOK  bool
	}{
		{name: "neither", wantPct: defaultGCPercent, wantOK: true},
		{name: "GOGC set", env: map[string]string{"GOGC": "200"}, wantOK: false},
		{name: "GOGC=off", env: map[string]string{"GOGC": "off"}, wantOK: false},
		{name: "flag given", args: []string{"--gc-percent=80"}, wantPct: 80, wantOK: true},
		{name: "flag given over GOGC", args: []string{"--gc-percent=80"}, env: map[string]string{"GOGC": "200"}, wantPct: 80, wantOK: true},
		{name: "flag given as the default over GOGC", args: []string{"--gc-percent=50"}, env: map[string]string{"GOGC": "200"}, wantPct: 50, wantOK: true},
		{name: "collector percentage off", args: []string{"--gc-percent=-1"}, wantPct: -1, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			v := fs.Int("gc-percent", defaultGCPercent, "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { s, ok := tc.env[k]; return s, ok }
			pct, ok := gcPercent(fs, *v, lookup)
			if ok != tc.wantOK || (ok && pct != tc.wantPct) {
				t.Fatalf("gcPercent = %d, %v; want %d, %v", pct, ok, tc.wantPct, tc.wantOK)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{in: "256Mi", want: 256 << 20},
		{in: "1G", want: 1e9},
		{in: "0", want: 0},
		{in: "-1Mi", wantErr: true},
		{in: "lots", wantErr: true},
	} {
		got, err := parseBytes(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("parseBytes(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
