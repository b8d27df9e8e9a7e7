#!/usr/bin/env bash
# scaleout.sh: what a write costs each node, one node against three, with
# trustplane bench (issue 32). For each setup it starts fresh nodes on
# loopback, runs the write workloads with clients spread over every node
# (round-robin over one kubeconfig per node), records every node's CPU by
# PID, and stops them:
#
#   one       one node
#   leader    three nodes, --execute-writes=leader (followers forward HTTP)
#   local     three nodes, --execute-writes=local (followers execute, the
#             leader orders their commands)
#   replicasN three voters and N read replicas (--role replica), e.g.
#             replicas0 replicas2 replicas4
#
#   SETUPS="one leader local" WORKLOADS=create,update,apply,patch \
#     BENCH_ARGS="--duration 10s --clients 16" scripts/scaleout.sh
#
# CLIENTS_ON picks the nodes the clients talk to: all (default),
# followers (every node but the leader, so the leader's CPU per operation
# is what a write arriving elsewhere costs it; FOLLOWERS_ONLY=1 is the
# same), leader, or replicas.
# CPUSET_SERVERS / CPUSET_BENCH, when set, pin the servers and the bench
# with taskset (e.g. CPUSET_SERVERS=0 CPUSET_BENCH=1). Results (bench
# tables and JSON, each node's log) go to SCALEOUT_DIR
# (bin/scaleout/<time>). Every process it starts it stops, by PID; every
# wait is bounded.
set -euo pipefail

SETUPS=${SETUPS:-one leader local}
WORKLOADS=${WORKLOADS:-create,update,apply,patch}
BENCH_ARGS=${BENCH_ARGS:-}
OUT=${SCALEOUT_DIR:-bin/scaleout/$(date -u +%Y%m%dT%H%M%SZ)}
TP=${TRUSTPLANE_BIN:-./bin/trustplane}
BASE=${SCALEOUT_PORT:-21443}
READY_TIMEOUT=${SCALEOUT_READY_TIMEOUT:-120}

mkdir -p "$OUT"
pids=()

pin() { # pin CPUSET CMD...: exec CMD, pinned when CPUSET is set (so a
  # backgrounded "pin" is the process itself, and $! its PID)
  local set=$1
  shift
  if [ -n "$set" ]; then exec taskset -c "$set" "$@"; else exec "$@"; fi
}

stop_all() {
  local p
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do
    [ -n "$p" ] || continue
    for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null || true
  done
  pids=()
}
trap stop_all EXIT

# start SETUP N MODE [R]: N fresh voters and R read replicas; sets pids,
# kubeconfigs (every node) and replica_kubeconfigs.
start() {
  local setup=$1 n=$2 mode=$3 r=${4:-0} dir="$OUT/$1"
  mkdir -p "$dir"
  "$TP" certs init --dir "$dir/ca" >/dev/null
  local seeds="" i
  for ((i = 0; i < n; i++)); do seeds+="${seeds:+,}127.0.0.1:$((BASE + 10 * i + 2))"; done
  kubeconfigs=""
  for ((i = 0; i < n; i++)); do
    local p=$((BASE + 10 * i)) args=()
    if [ "$n" -gt 1 ]; then
      args=(--bootstrap-expect "$n" --join "$seeds" --execute-writes "$mode")
    fi
    pin "${CPUSET_SERVERS:-}" "$TP" serve --node-name "n$((i + 1))" --data-dir "$dir/n$((i + 1))" --ca-dir "$dir/ca" \
      --listen "127.0.0.1:$p" --raft-addr "127.0.0.1:$((p + 1))" --gossip-addr "127.0.0.1:$((p + 2))" \
      "${args[@]}" >"$dir/n$((i + 1)).log" 2>&1 &
    pids+=($!)
    kubeconfigs+="${kubeconfigs:+,}$dir/n$((i + 1))/admin.kubeconfig"
  done
  wait_ready "$setup" 0 "$n"
  replica_kubeconfigs=""
  for ((i = n; i < n + r; i++)); do
    local p=$((BASE + 10 * i))
    pin "${CPUSET_SERVERS:-}" "$TP" serve --node-name "n$((i + 1))" --data-dir "$dir/n$((i + 1))" --ca-dir "$dir/ca" \
      --listen "127.0.0.1:$p" --raft-addr "127.0.0.1:$((p + 1))" --gossip-addr "127.0.0.1:$((p + 2))" \
      --role replica --join "$seeds" --execute-writes "$mode" >"$dir/n$((i + 1)).log" 2>&1 &
    pids+=($!)
    kubeconfigs+=",$dir/n$((i + 1))/admin.kubeconfig"
    replica_kubeconfigs+="${replica_kubeconfigs:+,}$dir/n$((i + 1))/admin.kubeconfig"
  done
  wait_ready "$setup" "$n" "$((n + r))"
}

# wait_ready SETUP FROM TO: nodes FROM+1..TO have written their kubeconfig.
# A node that exits first (a port another process holds: "address already
# in use") fails the run at once, with its log's last lines.
wait_ready() {
  local setup=$1 i k dir="$OUT/$1"
  for ((i = $2; i < $3; i++)); do
    for ((k = 0; k < READY_TIMEOUT * 2; k++)); do
      [ -f "$dir/n$((i + 1))/admin.kubeconfig" ] && break
      if ! kill -0 "${pids[$i]}" 2>/dev/null; then
        echo "n$((i + 1)) of $setup exited before it was ready (ports from SCALEOUT_PORT=$BASE; another process may hold one):" >&2
        tail -5 "$dir/n$((i + 1)).log" >&2
        exit 1
      fi
      sleep 0.5
    done
    [ -f "$dir/n$((i + 1))/admin.kubeconfig" ] || { echo "n$((i + 1)) of $setup not ready; see $dir/n$((i + 1)).log" >&2; exit 1; }
  done
}

for setup in $SETUPS; do
  case $setup in
    one) start one 1 leader ;;
    leader) start leader 3 leader ;;
    local) start local 3 local ;;
    replicas[0-9]*) start "$setup" 3 leader "${setup#replicas}" ;;
    *) echo "unknown setup $setup" >&2; exit 2 ;;
  esac
  leader=$(KUBECONFIG="${kubeconfigs%%,*}" kubectl get --raw /debug/trustplane/raft | sed -n 's/.*"leader":"\([^"]*\)".*/\1/p')
  on=${CLIENTS_ON:-all}
  [ "${FOLLOWERS_ONLY:-}" = 1 ] && on=followers
  targets=$kubeconfigs
  case $on in
    followers) [ "${#pids[@]}" -gt 1 ] && targets=$(echo "$kubeconfigs" | tr , '\n' | grep -v "/$leader/" | paste -sd, -) ;;
    leader) targets=$(echo "$kubeconfigs" | tr , '\n' | grep "/$leader/" | paste -sd, -) ;;
    replicas) targets=${replica_kubeconfigs:-} ;;
  esac
  [ -n "$targets" ] || { echo "== $setup: no node to send clients to ($on)"; stop_all; continue; }
  echo "== $setup: pids ${pids[*]} (n1 n2 ...), leader $leader, clients on $targets"
  # shellcheck disable=SC2086
  (pin "${CPUSET_BENCH:-}" "$TP" bench --kubeconfig "$targets" --server-pid "$(IFS=,; echo "${pids[*]}")" \
    --workloads "$WORKLOADS" --out "$OUT/$setup.json" $BENCH_ARGS >"$OUT/$setup.txt" 2>"$OUT/$setup.bench.log") ||
    echo "bench against $setup failed; see $OUT/$setup.bench.log" >&2
  echo "leader: $leader; pids: ${pids[*]}" >>"$OUT/$setup.txt"
  cat "$OUT/$setup.txt"
  stop_all
done
echo "results in $OUT"
