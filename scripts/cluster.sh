#!/usr/bin/env bash
# cluster.sh start|stop: three local trustplane nodes on loopback, with data
# under ./trustplane-cluster. "stop" ends exactly the processes "start" began
# (by the PIDs it recorded), gracefully (SIGTERM). Without --leave-on-terminate
# every node stays a voter, so a later "start" brings the same cluster back.
set -euo pipefail

ROOT=${TRUSTPLANE_CLUSTER_DIR:-./trustplane-cluster}
BIN=${TRUSTPLANE_BIN:-./bin/trustplane}
NODES=(n1 n2 n3)
BASE_PORTS=(6443 7443 8443)

start() {
  mkdir -p "$ROOT"
  "$BIN" certs init --dir "$ROOT/ca" >/dev/null
  local seeds="127.0.0.1:$((BASE_PORTS[0] + 2)),127.0.0.1:$((BASE_PORTS[1] + 2)),127.0.0.1:$((BASE_PORTS[2] + 2))"
  for i in "${!NODES[@]}"; do
    local n=${NODES[$i]} p=${BASE_PORTS[$i]}
    local pidfile="$ROOT/$n.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "$n is already running (pid $(cat "$pidfile"))"
      continue
    fi
    mkdir -p "$ROOT/$n"
    "$BIN" serve --node-name "$n" --data-dir "$ROOT/$n" --ca-dir "$ROOT/ca" \
      --listen "127.0.0.1:$p" --raft-addr "127.0.0.1:$((p + 1))" --gossip-addr "127.0.0.1:$((p + 2))" \
      --bootstrap-expect 3 --join "$seeds" >"$ROOT/$n/trustplane.log" 2>&1 &
    echo $! >"$pidfile"
  done
  for n in "${NODES[@]}"; do
    for _ in $(seq 1 300); do
      [ -f "$ROOT/$n/admin.kubeconfig" ] && break
      if ! kill -0 "$(cat "$ROOT/$n.pid")" 2>/dev/null; then
        echo "$n exited; see $ROOT/$n/trustplane.log" >&2
        exit 1
      fi
      sleep 0.2
    done
    [ -f "$ROOT/$n/admin.kubeconfig" ] || { echo "$n did not become ready; see $ROOT/$n/trustplane.log" >&2; exit 1; }
  done
  echo "three nodes are running. One kubeconfig per node:"
  for n in "${NODES[@]}"; do
    echo "  $n: export KUBECONFIG=$ROOT/$n/admin.kubeconfig"
  done
  echo "stop them with: make cluster-stop"
}

stop() {
  local pids=()
  for n in "${NODES[@]}"; do
    local pidfile="$ROOT/$n.pid"
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      pids+=("$pid")
    fi
    rm -f "$pidfile"
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "pid $pid did not stop after 15 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  echo "stopped ${#pids[@]} node(s)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
