#!/usr/bin/env bash
# compare.sh: trustplane against the reference (kube-apiserver + etcd +
# kube-controller-manager, make reference), side by side on this machine,
# with trustplane bench. Each round starts both servers fresh (one node
# each, fresh data), runs the same bench against one and then the other
# (the order alternates between rounds), recording the servers' CPU and
# memory by PID, and stops them. At the end it prints the ratios of the
# medians over the rounds (B = trustplane, A = the reference).
#
#   ROUNDS=3 BENCH_ARGS="--duration 10s" scripts/compare.sh
#
# Results go to COMPARE_DIR (bin/compare/<time>). Every server it starts it
# stops, by PID; every wait is bounded. Loopback only.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
BENCH_ARGS=${BENCH_ARGS:-}
OUT=${COMPARE_DIR:-bin/compare/$(date -u +%Y%m%dT%H%M%SZ)}
TP=${TRUSTPLANE_BIN:-./bin/trustplane}
TP_PORT=${COMPARE_TP_PORT:-19743}
READY_TIMEOUT=${COMPARE_READY_TIMEOUT:-120}

mkdir -p "$OUT"
tp_pid=""

stop_tp() {
  if [ -n "$tp_pid" ] && kill -0 "$tp_pid" 2>/dev/null; then
    kill "$tp_pid"
    for _ in $(seq 60); do kill -0 "$tp_pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$tp_pid" 2>/dev/null || true
  fi
  tp_pid=""
}

stop_ref() {
  REFERENCE_DIR="$1" scripts/reference.sh stop >/dev/null 2>&1 || true
}

cleanup() {
  stop_tp
  for d in "$OUT"/kube-*/; do [ -d "$d" ] && stop_ref "${d%/}"; done
}
trap cleanup EXIT

# run_tp ROUND: a fresh one-node trustplane, benched, stopped.
run_tp() {
  local r=$1 dir="$OUT/tp-$1"
  mkdir -p "$dir"
  "$TP" serve --data-dir "$dir/data" --listen "127.0.0.1:$TP_PORT" \
    --raft-addr "127.0.0.1:$((TP_PORT + 1))" --gossip-addr "127.0.0.1:$((TP_PORT + 2))" \
    --node-name compare >"$dir/server.log" 2>&1 &
  tp_pid=$!
  local i
  for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
    [ -f "$dir/data/admin.kubeconfig" ] && break
    kill -0 "$tp_pid" 2>/dev/null || { echo "trustplane exited; see $dir/server.log" >&2; exit 1; }
    sleep 0.5
  done
  [ -f "$dir/data/admin.kubeconfig" ] || { echo "trustplane not ready after ${READY_TIMEOUT}s" >&2; exit 1; }
  echo "== round $r: trustplane (pid $tp_pid)"
  # shellcheck disable=SC2086
  "$TP" bench --kubeconfig "$dir/data/admin.kubeconfig" --server-pid "$tp_pid" \
    --out "$OUT/tp-$r.json" $BENCH_ARGS >"$dir/bench.txt" 2>"$dir/bench.log" || echo "bench against trustplane failed; see $dir/bench.log" >&2
  stop_tp
}

# run_ref ROUND: a fresh reference, benched, stopped.
run_ref() {
  local r=$1 dir="$OUT/kube-$1"
  mkdir -p "$dir"
  REFERENCE_DIR="$dir" scripts/reference.sh start >"$dir/start.log" 2>&1 || { cat "$dir/start.log" >&2; exit 1; }
  local pids
  pids=$(cat "$dir"/etcd.pid "$dir"/kube-apiserver.pid "$dir"/kube-controller-manager.pid | paste -sd, -)
  echo "== round $r: kube-apiserver + etcd + kube-controller-manager (pids $pids)"
  # shellcheck disable=SC2086
  "$TP" bench --kubeconfig "$dir/admin.kubeconfig" --server-pid "$pids" \
    --out "$OUT/kube-$r.json" $BENCH_ARGS >"$dir/bench.txt" 2>"$dir/bench.log" || echo "bench against the reference failed; see $dir/bench.log" >&2
  stop_ref "$dir"
}

for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2 == 1)); then run_tp "$r"; run_ref "$r"; else run_ref "$r"; run_tp "$r"; fi
done

kube=$(ls "$OUT"/kube-[0-9]*.json | paste -sd, -)
tp=$(ls "$OUT"/tp-[0-9]*.json | paste -sd, -)
"$TP" bench compare "$kube" "$tp" | tee "$OUT/compare.txt"
echo "results in $OUT"
