#!/usr/bin/env bash
# fuzz.sh [packages...]: run every Go fuzz target in the given packages
# (default: every package with a func Fuzz in a test file) for FUZZTIME each (default 30s),
# one after another, with one worker (-parallel=1), so that a longer run
# than CI's seed-corpus pass fits beside other work. A crash stops the run
# with go test's report; the failing input is written under the package's
# testdata/fuzz/<Target>/, where it becomes a seed: fix the bug, keep the
# file.
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
# Minimizing each new interesting input can take most of a short run when an
# input is one HTTP request through the stores; keep it short.
MINIMIZETIME=${FUZZMINIMIZETIME:-5s}
PARALLEL=${FUZZ_PARALLEL:-1}
if [ "$#" -gt 0 ]; then
  pkgs=("$@")
else
  mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u)
fi

ran=0
for pkg in "${pkgs[@]}"; do
  # go test -list prints the matching names, then "ok <pkg> <time>".
  targets=$("$GO" test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
  for t in $targets; do
    echo "== $pkg $t ($FUZZTIME)"
    "$GO" test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$MINIMIZETIME" -parallel "$PARALLEL" "$pkg"
    ran=$((ran + 1))
  done
done
echo "fuzz.sh: $ran targets ran for $FUZZTIME each, no crash"
