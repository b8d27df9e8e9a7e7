#!/usr/bin/env bash
# conformance.sh [build|list|run [one|three]...]: kube's upstream end-to-end
# suite (e2e.test from k8s.io/kubernetes/test/e2e at the version
# conformance/go.mod pins) against trustplane, for make conformance (not part
# of make test; docs/COMPATIBILITY.md, "Upstream e2e specs").
#
#   build  builds bin/e2e.test (if missing or older than conformance/go.mod)
#          and bin/trustplane (if missing)
#   list   prints the specs the selection below runs (a dry run, no server)
#   run    (the default) builds what is missing, then for each topology (one
#          node, three nodes; both by default) starts a fresh cluster in a
#          temporary directory on free loopback ports, runs the selected specs
#          against it and stops exactly the processes it started (by PID, also
#          on error or interrupt). Reports (ginkgo JSON, JUnit, the suite's
#          output and the nodes' logs) go to $CONFORMANCE_OUT/<topology>; the
#          summary of both runs to $CONFORMANCE_OUT/results.md, which make
#          conformance copies to docs/conformance/.
#
# The selection: the specs of sig-api-machinery, sig-auth,
# sig-instrumentation and sig-architecture, and the API-only specs of other
# SIGs (conformance/include.txt), minus those that need nodes, a kubelet or
# running pods (conformance/exclude.txt, each with its reason). Flaky,
# Disruptive, Alpha and Feature-labelled specs are left out, as kube's own
# default runs do. A spec that fails because trustplane does not serve its
# kind stays selected: conformance/reasons.yaml says why it fails.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
BIN=${TRUSTPLANE_BIN:-$ROOT/bin/trustplane}
E2E=${E2E_TEST:-$ROOT/bin/e2e.test}
OUT=${CONFORMANCE_OUT:-$ROOT/bin/conformance}
# Bounds: the whole suite per topology (ginkgo's --timeout), and a hard
# bound on the e2e.test process a little beyond it.
SUITE_TIMEOUT=${CONFORMANCE_TIMEOUT:-60m}
READY_TIMEOUT=${CONFORMANCE_READY_TIMEOUT:-120}
NICE=${CONFORMANCE_NICE:-10}
# patterns FILE joins the patterns of conformance/FILE (one a line, "#"
# starts a comment) into one alternation.
patterns() {
  local line re=""
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}
    line=${line%"${line##*[![:space:]]}"}
    [ -n "$line" ] || continue
    re+="${re:+|}$line"
  done <"$ROOT/conformance/$1"
  printf '%s' "$re"
}

# CONFORMANCE_FOCUS replaces the selection's focus (a regular expression on
# the full spec text), for rerunning a few specs.
FOCUS=${CONFORMANCE_FOCUS:-$(patterns include.txt)}
# The specs of a feature gate run when trustplane has the gate on by
# default: kube's beta gates that are on (their specs carry FeatureGate:<name>
# and Beta), and the gates trustplane turns on where kube 1.33 has them off
# (defaultGates in cmd/trustplane/features.go; its TestConformanceSelectsDefaultGates
# keeps this list equal to it), whose specs also carry BetaOffByDefault.
DEFAULT_ON_GATES="WatchList"
gate_labels() {
  local g out=""
  for g in $DEFAULT_ON_GATES; do out+="${out:+ || }FeatureGate:$g"; done
  printf '%s' "$out"
}
# kube labels the specs of a beta gate that is off by default both
# BetaOffByDefault and Feature:OffByDefault; those of the gates in
# DEFAULT_ON_GATES are selected despite both.
LABELS=${CONFORMANCE_LABELS:-"!Flaky && !Disruptive && !Alpha && (!/^Feature:/ || (Feature:OffByDefault && ($(gate_labels)))) && (!BetaOffByDefault || $(gate_labels))"}

selection_args() {
  printf '%s\n' "--ginkgo.focus=$FOCUS" "--ginkgo.skip=$(patterns exclude.txt)" "--ginkgo.label-filter=$LABELS"
}

build() {
  mkdir -p "$(dirname "$E2E")" "$(dirname "$BIN")"
  if [ ! -x "$E2E" ] || [ "$ROOT/conformance/go.mod" -nt "$E2E" ] || [ "$ROOT/conformance/go.sum" -nt "$E2E" ]; then
    # The version stamps upstream's build gives e2e.test (as make
    # reference-build does for kube-apiserver), read from go.mod.
    local v minor x="" p
    v=$(cd "$ROOT/conformance" && "$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
    minor=${v#v1.}
    minor=${minor%%.*}
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      x+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=archive"
    done
    echo "building $E2E (k8s.io/kubernetes/test/e2e $v; a cold build takes a while)"
    (cd "$ROOT/conformance" && CGO_ENABLED=0 nice -n 15 "$GO" test -c -ldflags "$x" -o "$E2E" k8s.io/kubernetes/test/e2e)
  fi
  if [ ! -x "$BIN" ]; then
    (cd "$ROOT" && CGO_ENABLED=0 "$GO" build -o "$BIN" ./cmd/trustplane)
  fi
}

list() {
  local args=() tmp
  mapfile -t args < <(selection_args)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/trustplane-conformance-list.XXXXXX")
  "$E2E" --ginkgo.dry-run --ginkgo.no-color --provider=skeleton \
    --ginkgo.json-report="$tmp/report.json" "${args[@]}" >"$tmp/e2e.log" 2>&1 || true
  (cd "$ROOT/conformance" && "$GO" run ./cmd/conformance-report --list "$tmp/report.json")
  rm -rf "$tmp"
}

# --- processes this script started, stopped by PID ---------------------------

PIDS=()

stop_pids() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "pid $pid did not stop after 15 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}

WORK=""
cleanup() {
  stop_pids
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- ports --------------------------------------------------------------------

# port_free P: nothing listens on loopback port P (TCP or UDP).
port_free() {
  ! ss -Hlntu "sport = :$1" 2>/dev/null | grep -q .
}

# free_base N: a port B such that B..B+2, B+10..B+12, ... for N nodes are
# free (API, raft, gossip of each node).
free_base() {
  local n=$1 base i j ok
  for _ in $(seq 1 100); do
    base=$((20000 + (RANDOM % 4000) * 10))
    ok=1
    for ((i = 0; i < n; i++)); do
      for j in 0 1 2; do
        port_free $((base + 10 * i + j)) || ok=0
      done
    done
    if [ "$ok" = 1 ]; then
      echo "$base"
      return 0
    fi
  done
  echo "no free loopback ports found" >&2
  return 1
}

# --- one cluster --------------------------------------------------------------

# start_cluster DIR N: N nodes with data under DIR/nK; sets KUBECONFIG_USED
# to the kubeconfig the suite uses (a follower's, when there are several, so
# that its writes are forwarded to the leader).
KUBECONFIG_USED=""
start_cluster() {
  local dir=$1 n=$2 base seeds="" i p
  base=$(free_base "$n")
  if [ "$n" -gt 1 ]; then
    "$BIN" certs init --dir "$dir/ca" >/dev/null
    for ((i = 0; i < n; i++)); do
      seeds+="${seeds:+,}127.0.0.1:$((base + 10 * i + 2))"
    done
  fi
  for ((i = 1; i <= n; i++)); do
    p=$((base + 10 * (i - 1)))
    mkdir -p "$dir/n$i"
    local args=(serve --node-name "n$i" --data-dir "$dir/n$i"
      --listen "127.0.0.1:$p" --raft-addr "127.0.0.1:$((p + 1))" --gossip-addr "127.0.0.1:$((p + 2))")
    if [ "$n" -gt 1 ]; then
      args+=(--ca-dir "$dir/ca" --bootstrap-expect "$n" --join "$seeds")
    fi
    "$BIN" "${args[@]}" >"$dir/n$i/trustplane.log" 2>&1 &
    PIDS+=($!)
    echo "started n$i (pid $!) on 127.0.0.1:$p" >&2
  done
  local k deadline=$((SECONDS + READY_TIMEOUT))
  for ((i = 1; i <= n; i++)); do
    k=$dir/n$i/admin.kubeconfig
    until [ -f "$k" ] && kubectl --kubeconfig "$k" get --raw /readyz >/dev/null 2>&1; do
      if [ "$SECONDS" -ge "$deadline" ]; then
        echo "n$i was not ready after ${READY_TIMEOUT}s; see $dir/n$i/trustplane.log" >&2
        return 1
      fi
      sleep 0.5
    done
  done
  # The suite's first namespace waits for its default ServiceAccount; so
  # does this, for "default", so that a slow start is not a spec's failure.
  k=$dir/n1/admin.kubeconfig
  until kubectl --kubeconfig "$k" -n default get serviceaccount default >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "no default ServiceAccount after ${READY_TIMEOUT}s" >&2
      return 1
    fi
    sleep 0.5
  done
  local chosen=$k
  if [ "$n" -gt 1 ]; then
    for ((i = n; i >= 1; i--)); do
      k=$dir/n$i/admin.kubeconfig
      if ! kubectl --kubeconfig "$k" get --raw /debug/trustplane/raft 2>/dev/null | grep -q '"state": *"Leader"'; then
        chosen=$k
        break
      fi
    done
  fi
  KUBECONFIG_USED=$chosen
}

# run_topology NAME N: a fresh N-node cluster, the selected specs, the reports.
run_topology() {
  local name=$1 n=$2 out=$OUT/$1
  rm -rf "$out"
  mkdir -p "$out"
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/trustplane-conformance.XXXXXX")
  start_cluster "$WORK" "$n"
  local kubeconfig=$KUBECONFIG_USED
  echo "$name: running the selected specs against $kubeconfig (bounded by $SUITE_TIMEOUT)"
  local args=()
  mapfile -t args < <(selection_args)
  local rc=0
  # e2e.test in the background, so that the traps can stop it by its PID.
  nice -n "$NICE" timeout --kill-after=30s "$(bound "$SUITE_TIMEOUT")" \
    "$E2E" --kubeconfig="$kubeconfig" --provider=skeleton \
    --num-nodes=0 --allowed-not-ready-nodes=-1 --minStartupPods=-1 \
    --e2e-verify-service-account=true --dump-logs-on-failure=false \
    --kubectl-path="$(command -v kubectl)" --e2e-output-dir="$out" \
    --ginkgo.timeout="$SUITE_TIMEOUT" --ginkgo.no-color --ginkgo.v \
    --ginkgo.json-report="$out/report.json" --ginkgo.junit-report="$out/junit.xml" \
    "${args[@]}" >"$out/e2e.log" 2>&1 &
  local e2e=$!
  PIDS+=("$e2e")
  wait "$e2e" || rc=$?
  stop_pids
  for ((i = 1; i <= n; i++)); do
    cp "$WORK/n$i/trustplane.log" "$out/n$i.log" 2>/dev/null || true
  done
  rm -rf "$WORK"
  WORK=""
  grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!)' "$out/e2e.log" | sed "s/^/$name: /" || true
  echo "$name: e2e.test exited $rc; log $out/e2e.log"
}

# bound D: D (a Go duration such as 60m or 1h30m) plus five minutes, in
# seconds, for timeout(1).
bound() {
  local d=$1 s=0 num
  while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
    num=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in
      h) s=$((s + num * 3600)) ;;
      m) s=$((s + num * 60)) ;;
      s) s=$((s + num)) ;;
    esac
    d=${BASH_REMATCH[3]}
  done
  echo "$((s + 300))s"
}

run() {
  local topologies=("$@")
  [ ${#topologies[@]} -gt 0 ] || topologies=(one three)
  build
  local t reports=()
  for t in "${topologies[@]}"; do
    case $t in
      one) run_topology one 1 ;;
      three) run_topology three 3 ;;
      *) echo "unknown topology $t (one, three)" >&2; exit 2 ;;
    esac
    reports+=("--report=$t=$OUT/$t/report.json")
  done
  (cd "$ROOT/conformance" && "$GO" run ./cmd/conformance-report --reasons reasons.yaml \
    --focus "$FOCUS" --labels "$LABELS" --out "$OUT/results.md" "${reports[@]}")
  echo "summary: $OUT/results.md"
}

cmd=${1:-run}
[ $# -eq 0 ] || shift
case $cmd in
  build) build ;;
  list) build && list ;;
  run) run "$@" ;;
  *) echo "usage: $0 [build|list|run [one|three]...]" >&2; exit 2 ;;
esac
