package main

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// defaultGCPercent is the garbage collector's GOGC that serve applies to a
// large live heap when the operator chose none. Go's default, 100, lets the
// heap grow to twice what is live before a collection; a node holding
// 100,000 objects then peaked at about 1.3 GiB RSS for 0.5 GiB live. 50
// lets it grow by half: a lower peak for more collections
// (docs/BENCHMARKS.md, "The memory round at 100k objects").
const defaultGCPercent = 50

// defaultGCMinHeadroom keeps the collector at Go's default while the live
// heap is under 256 MiB: there 50% cost creates 19% more CPU
// (docs/BENCHMARKS.md) to save memory a small store does not need.
const defaultGCMinHeadroom = "256Mi"

// parseBytes reads a byte count as a Kubernetes quantity ("256Mi").
func parseBytes(s string) (uint64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%s is negative", s)
	}
	return uint64(q.Value()), nil
}

// gcPercent decides the collector's percentage for serve: the flag's value
// when the flag was given (on the command line or as its environment twin),
// else nothing when GOGC is set (the runtime has already applied it), else
// the flag's default. ok is false when the runtime's setting stays.
func gcPercent(fs *flag.FlagSet, value int, lookupEnv func(string) (string, bool)) (pct int, ok bool) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "gc-percent" })
	if !given {
		if _, set := lookupEnv("GOGC"); set {
			return 0, false
		}
	}
	return value, true
}
