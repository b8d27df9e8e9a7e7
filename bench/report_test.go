package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, sample()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if want := "server v1.33.13+trustplane, 3 node(s), 2 endpoint(s), 16 client(s); client machine linux/amd64, 2 CPU"; lines[0] != want {
		t.Fatalf("first line %q, want %q", lines[0], want)
	}
	table := lines[2:5]
	for _, tc := range []struct {
		name string
		line string
		want []string
	}{
		{"header names the columns and the latency unit", table[0], []string{"WORKLOAD", "OPS", "OPS/S", "P50(ms)", "P90(ms)", "P99(ms)", "ERRORS", "BENCH", "CPU"}},
		{"a row has ops, rate, percentiles and errors", table[1], []string{"create", "50000", "4995", "2.50", "5.25", "12.1", "0", "0.87"}},
		{"a workload without operations has no latencies", table[2], []string{"csr", "0", "0.0", "-", "-", "-", "2", "-"}},
	} {
		if got := strings.Fields(tc.line); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %q, want fields %q", tc.name, tc.line, tc.want)
		}
	}
	for _, l := range table[1:] {
		if len(l) != len(table[0]) {
			t.Errorf("columns are not aligned: %q and %q differ in width", table[0], l)
		}
	}
	out := buf.String()
	for _, want := range []string{
		"BENCH CPU: cores the bench's own clients used (of 2 on its machine)\n",
		"one operation is:\n  create: create one ConfigMap (JSON)\n",
		"csr FAILED (2), first messages:\n  - preparing: no signer\n  - other\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		v          float64
		rate, msec string
	}{
		{0, "0.0", "-"},
		{0.126, "0.1", "0.13"},
		{9.996, "10.0", "10.00"},
		{42.42, "42.4", "42.4"},
		{99.94, "99.9", "99.9"},
		{1234.4, "1234", "1234"},
	} {
		if got := rate(tc.v); got != tc.rate {
			t.Errorf("rate(%v) = %q, want %q", tc.v, got, tc.rate)
		}
		if got := millis(tc.v); got != tc.msec {
			t.Errorf("millis(%v) = %q, want %q", tc.v, got, tc.msec)
		}
	}
}
