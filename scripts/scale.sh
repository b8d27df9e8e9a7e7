#!/usr/bin/env bash
# scale.sh: how trustplane's costs grow with the work, measured with
# trustplane bench on fresh one-node servers on loopback:
#
#   objects   creates/s, GET latency and server memory with N objects stored
#             (OBJECTS, default "10000 100000 1000000"; bench --objects)
#   list      one list of L ConfigMaps, unpaged and in pages of 500, by one
#             client (LIST_SIZES, default "1000 10000 100000")
#   watch     delivery latency to W watchers at 100 writes/s (WATCHERS,
#             default "100 1000 10000")
#   snapshot  at the largest N: snapshot save, snapshot restore, the
#             restored node's start, and a new empty node's catch-up to it
#             (by InstallSnapshot), each timed; with SNAPSHOT=file (and
#             SNAPSHOT_OBJECTS=N for the table) it restores that file
#             instead of saving one
#
# and draws the curves with "trustplane bench plot" into SCALE_DIR (default
# bin/scale/<time>): objects.svg, list.svg, watch.svg, with every result's
# JSON and snapshot.tsv beside them.
#
#   PHASES="objects list watch snapshot" scripts/scale.sh
#
# Every server it starts it stops, by PID; every wait is bounded. Loopback
# only.
set -euo pipefail

TP=${TRUSTPLANE_BIN:-./bin/trustplane}
OUT=${SCALE_DIR:-bin/scale/$(date -u +%Y%m%dT%H%M%SZ)}
PHASES=${PHASES:-objects list watch snapshot}
OBJECTS=${OBJECTS:-10000 100000 1000000}
LIST_SIZES=${LIST_SIZES:-1000 10000 100000}
WATCHERS=${WATCHERS:-100 1000 10000}
DURATION=${DURATION:-10s}
PORT=${SCALE_PORT:-19843}
READY_TIMEOUT=${SCALE_READY_TIMEOUT:-600}
CATCHUP_TIMEOUT=${SCALE_CATCHUP_TIMEOUT:-1800}
SETUP_TIMEOUT=${SCALE_SETUP_TIMEOUT:-60m}

mkdir -p "$OUT"
pids=()

stop_all() {
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      kill "$p"
      for _ in $(seq 120); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$p" 2>/dev/null || true
    fi
  done
  pids=()
}
trap stop_all EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# wait_file FILE PID: until FILE exists (the node writes its kubeconfig
# once ready), bounded by READY_TIMEOUT; fails if PID exits.
wait_file() {
  local deadline=$(($(date +%s) + READY_TIMEOUT))
  until [ -f "$1" ]; do
    kill -0 "$2" 2>/dev/null || { echo "scale: server $2 exited" >&2; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { echo "scale: $1 not written within ${READY_TIMEOUT}s" >&2; return 1; }
    sleep 0.2
  done
}

# serve DIR PORT [ARGS...]: start a node with data in DIR, API on PORT,
# Raft and gossip on the next two ports; sets $pid. DIR starts empty,
# unless KEEP_DATA=1 (a restored node's data directory).
serve() {
  local dir=$1 port=$2
  shift 2
  # Fresh every time: a kubeconfig left by an earlier run would pass for
  # readiness. Every data directory is the script's own, under $OUT.
  if [ "${KEEP_DATA:-0}" = 1 ]; then
    rm -f "$dir/admin.kubeconfig" "$dir.log"
  else
    rm -rf "$dir" "$dir.log"
  fi
  mkdir -p "$dir"
  "$TP" serve --data-dir "$dir" --listen "127.0.0.1:$port" \
    --raft-addr "127.0.0.1:$((port + 1))" --gossip-addr "127.0.0.1:$((port + 2))" "$@" \
    >"$dir.log" 2>&1 &
  pid=$!
  pids+=("$pid")
}

# bench_run NAME PID ARGS...: trustplane bench against the node of PID,
# result in $OUT/NAME.json.
bench_run() {
  local name=$1 p=$2 kc=$3
  shift 3
  echo "scale: $name"
  "$TP" bench --kubeconfig "$kc" --server-pid "$p" --duration "$DURATION" \
    --setup-timeout "$SETUP_TIMEOUT" --progress-interval 30s --out "$OUT/$name.json" "$@" \
    >"$OUT/$name.txt" 2>"$OUT/$name.err" ||
    echo "scale: $name had a failed workload (see $OUT/$name.err); its figures are kept"
  cat "$OUT/$name.txt"
}

# raft_applied KUBECONFIG URL: the applied index of the node at URL, read
# from /debug/trustplane/raft with the kubeconfig's admin credentials.
raft_applied() {
  python3 - "$1" "$2" <<'EOF'
import base64, json, os, re, ssl, sys, tempfile, urllib.request
kc, url = sys.argv[1], sys.argv[2]
s = open(kc).read()
get = lambda k: base64.b64decode(re.search(k + r': (\S+)', s).group(1))
d = tempfile.mkdtemp()
for n, k in (("ca", "certificate-authority-data"), ("crt", "client-certificate-data"), ("key", "client-key-data")):
    open(os.path.join(d, n), "wb").write(get(k))
ctx = ssl.create_default_context(cafile=os.path.join(d, "ca"))
ctx.load_cert_chain(os.path.join(d, "crt"), os.path.join(d, "key"))
ctx.check_hostname = False
try:
    with urllib.request.urlopen(url + "/debug/trustplane/raft", context=ctx, timeout=5) as r:
        print(json.load(r)["appliedIndex"])
except Exception:
    print(0)
EOF
}

phase_objects() {
  local max=0 n
  for n in $OBJECTS; do [ "$n" -gt "$max" ] && max=$n; done
  for n in $OBJECTS; do
    local dir="$OUT/objects-$n/data" keep=()
    # The largest store stays for the snapshot phase.
    if [ "$n" = "$max" ] && [[ " $PHASES " == *" snapshot "* ]]; then
      keep=(--keep)
    fi
    serve "$dir" "$PORT"
    wait_file "$dir/admin.kubeconfig" "$pid"
    bench_run "objects-$n" "$pid" "$dir/admin.kubeconfig" --objects "$n" --workloads create,get,get-rv0 "${keep[@]}"
    if [ ${#keep[@]} -gt 0 ]; then
      snapshot_from "$dir" "$pid" "$n"
    fi
    stop_all
  done
  "$TP" bench plot --x objects --log-x --y create:ops --y get:ops --y get-rv0:ops --title "operations per second against objects stored" --out "$OUT/objects-ops.svg" "$OUT"/objects-*.json
  "$TP" bench plot --x objects --log-x --y create:p99 --y get:p99 --y get-rv0:p99 --title "p99 latency against objects stored" --out "$OUT/objects-p99.svg" "$OUT"/objects-*.json
  "$TP" bench plot --x objects --log-x --y get:rss --title "server memory against objects stored" --out "$OUT/objects-rss.svg" "$OUT"/objects-*.json
}

# snapshot_from DIR PID N: save a snapshot of the node at DIR, restore it
# into a new node, start that node, then start an empty node that joins it
# and time its catch-up to the restored index.
snapshot_from() {
  local dir=$1 p=$2 n=$3 t
  local snap="$OUT/snapshot-$n.snap" tsv="$OUT/snapshot.tsv"
  printf 'objects\tstep\tseconds\tdetail\n' >"$tsv"
  t=$(now)
  "$TP" snapshot save --kubeconfig "$dir/admin.kubeconfig" -o "$snap" >"$OUT/snapshot-save.txt" 2>&1
  printf '%s\tsnapshot save\t%s\t%s bytes\n' "$n" "$(since "$t")" "$(stat -c %s "$snap")" >>"$tsv"
  stop_all
  restore_from "$snap" "$n"
}

# restore_from SNAP N: restore SNAP (of a store of N objects) into a new
# node, start it, then start an empty node that joins it and time its
# catch-up to the restored index.
restore_from() {
  local snap=$1 n=$2 t tsv="$OUT/snapshot.tsv"
  [ -f "$tsv" ] || printf 'objects\tstep\tseconds\tdetail\n' >"$tsv"
  "$TP" snapshot inspect "$snap" >"$OUT/snapshot-inspect.txt"

  # The restored cluster gets a CA directory with a node CA and a gossip
  # key, so that a second node can join it.
  local r1="$OUT/restored/r1" r2="$OUT/restored/r2" p1=$((PORT + 10)) p2=$((PORT + 20))
  mkdir -p "$OUT/restored"
  "$TP" certs init --dir "$OUT/ca" >/dev/null
  t=$(now)
  "$TP" snapshot restore --file "$snap" --data-dir "$r1" --node-name r1 --raft-addr "127.0.0.1:$((p1 + 1))" >"$OUT/snapshot-restore.txt" 2>&1
  printf '%s\tsnapshot restore\t%s\t\n' "$n" "$(since "$t")" >>"$tsv"

  local seeds="127.0.0.1:$((p1 + 2)),127.0.0.1:$((p2 + 2))"
  t=$(now)
  KEEP_DATA=1 serve "$r1" "$p1" --node-name r1 --ca-dir "$OUT/ca" --join "$seeds"
  local pid1=$pid
  wait_file "$r1/admin.kubeconfig" "$pid1"
  printf '%s\trestored node start to ready\t%s\tRSS %s kB\n' "$n" "$(since "$t")" "$(awk '/VmHWM/ {print $2}' /proc/$pid1/status)" >>"$tsv"

  local target snapidx
  target=$(raft_applied "$r1/admin.kubeconfig" "https://127.0.0.1:$p1")
  # The restored node must hold the snapshot, or the catch-up below times
  # an empty cluster.
  snapidx=$(awk '/^index:/ {print $2}' "$OUT/snapshot-inspect.txt")
  if [ "$target" -lt "$snapidx" ]; then
    echo "scale: the restored node is at index $target, below the snapshot's $snapidx" >&2
    return 1
  fi
  t=$(now)
  serve "$r2" "$p2" --node-name r2 --ca-dir "$OUT/ca" --join "$seeds"
  local pid2=$pid deadline=$(($(date +%s) + CATCHUP_TIMEOUT)) got=0
  while :; do
    got=$(raft_applied "$r1/admin.kubeconfig" "https://127.0.0.1:$p2")
    [ "$got" -ge "$target" ] && break
    kill -0 "$pid2" 2>/dev/null || { echo "scale: r2 exited" >&2; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { echo "scale: r2 did not catch up within ${CATCHUP_TIMEOUT}s" >&2; return 1; }
    sleep 0.5
  done
  printf '%s\tnew node catch-up (start to applied index %s)\t%s\tRSS %s kB\n' "$n" "$target" "$(since "$t")" "$(awk '/VmHWM/ {print $2}' /proc/$pid2/status)" >>"$tsv"
  cat "$tsv"
}

phase_list() {
  local l dir
  for l in $LIST_SIZES; do
    dir="$OUT/list-$l/data"
    serve "$dir" "$PORT"
    wait_file "$dir/admin.kubeconfig" "$pid"
    # One client: the time of one list, not of a queue of them.
    bench_run "list-$l" "$pid" "$dir/admin.kubeconfig" --list-size "$l" --workloads list,list-paged \
      --clients 1 --request-timeout 5m
    stop_all
  done
  "$TP" bench plot --x list-size --log-x --log-y --y list:p50 --y list-paged:p50 --title "list latency against list size" --out "$OUT/list.svg" "$OUT"/list-*.json
  "$TP" bench plot --x list-size --log-x --log-y --y list:cpu --y list-paged:cpu --title "server CPU per list against list size" --out "$OUT/list-cpu.svg" "$OUT"/list-*.json
}

phase_watch() {
  local w dir
  for w in $WATCHERS; do
    dir="$OUT/watch-$w/data"
    serve "$dir" "$PORT" --max-watches "$((w + 100))"
    wait_file "$dir/admin.kubeconfig" "$pid"
    bench_run "watch-$w" "$pid" "$dir/admin.kubeconfig" --watchers "$w" --watch-rate 100 --workloads watch
    stop_all
  done
  "$TP" bench plot --x watchers --log-x --y watch:p50 --y watch:p99 --title "watch delivery latency against watchers (100 writes/s)" --out "$OUT/watch.svg" "$OUT"/watch-*.json
  "$TP" bench plot --x watchers --log-x --y watch:rss --title "server memory against watchers" --out "$OUT/watch-rss.svg" "$OUT"/watch-*.json
}

echo "scale: results in $OUT"
for ph in $PHASES; do
  case $ph in
  objects) phase_objects ;;
  list) phase_list ;;
  watch) phase_watch ;;
  snapshot)
    # With SNAPSHOT (a file saved earlier, of SNAPSHOT_OBJECTS objects),
    # only the restore, restored start and catch-up run.
    if [ -n "${SNAPSHOT:-}" ]; then
      restore_from "$SNAPSHOT" "${SNAPSHOT_OBJECTS:-unknown}"
    else
      [[ " $PHASES " == *" objects "* ]] || { echo "scale: the snapshot phase runs at the end of the objects phase, or on SNAPSHOT=file" >&2; exit 2; }
    fi
    ;;
  *) echo "scale: unknown phase $ph" >&2; exit 2 ;;
  esac
done
echo "scale: done; results in $OUT"
