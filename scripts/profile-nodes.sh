#!/usr/bin/env bash
# profile-nodes.sh: where a create's CPU goes, on every node (issue 32).
# It runs scripts/scaleout.sh for one setup with a 25 s create workload,
# takes a 10 s CPU profile of every node from 12 s into it (kubectl get
# --raw /debug/pprof/profile), and prints the CPU of a few frames per
# create, summed over the nodes (cumulative time, so rows overlap):
#
#   PROFILE_DIR=/tmp/p SETUP=local CLIENTS=16 scripts/profile-nodes.sh
#   PROFILE_DIR=/tmp/p1 SETUP=one CLIENTS=16 scripts/profile-nodes.sh
#
# SETUP is one of scaleout.sh's (one, local, leader, replicasN); with
# three nodes the clients talk to the followers only, unless CLIENTS_ON
# says otherwise. Creates during the profile are counted as the run's
# mean rate times the profile's length. Run the two setups back to back,
# and once more the first: this machine's speed drifts by a fifth within
# minutes, so only figures of neighbouring runs compare.
set -euo pipefail

SETUP=${SETUP:-local}
CLIENTS=${CLIENTS:-16}
OUT=${PROFILE_DIR:-bin/profile/$(date -u +%Y%m%dT%H%M%SZ)-$SETUP-$CLIENTS}
PROFILE_SECONDS=10
START_AFTER=12

mkdir -p "$OUT"
if [ "$SETUP" != one ]; then export CLIENTS_ON=${CLIENTS_ON:-followers}; fi
SCALEOUT_DIR=$OUT SETUPS=$SETUP WORKLOADS=create \
  BENCH_ARGS="--duration 25s --clients $CLIENTS" timeout 600 scripts/scaleout.sh >"$OUT/scaleout.log" 2>&1 &
run=$!

# Wait (bounded) for the bench to start, then for the workload to settle.
for _ in $(seq 240); do
  grep -q '^pids\|clients on' "$OUT/scaleout.log" 2>/dev/null && break
  kill -0 "$run" 2>/dev/null || break
  sleep 0.5
done
sleep "$START_AFTER"
profs=()
for kc in "$OUT/$SETUP"/n*/admin.kubeconfig "$OUT/$SETUP"/r*/admin.kubeconfig; do
  [ -f "$kc" ] || continue
  node=$(basename "$(dirname "$kc")")
  KUBECONFIG=$kc timeout 60 kubectl get --raw "/debug/pprof/profile?seconds=$PROFILE_SECONDS" >"$OUT/$node.prof" &
  profs+=("$OUT/$node.prof")
done
wait
[ -f "$OUT/$SETUP.txt" ] || { echo "no bench result; see $OUT/scaleout.log" >&2; exit 1; }
cat "$OUT/$SETUP.txt"
rate=$(awk '$1 == "create" {print $3}' "$OUT/$SETUP.txt")
[ -n "$rate" ] || { echo "no create rate in $OUT/$SETUP.txt" >&2; exit 1; }
creates=$((rate * PROFILE_SECONDS))

echo
echo "µs of CPU per create, all nodes summed ($creates creates during the profiles):"
for p in "${profs[@]}"; do go tool pprof -top -cum -nodecount=5000 "$p" 2>/dev/null | awk 'NR > 6 {print $4, $6}'; done |
  awk -v w="$creates" '
  function secs(v) { if (v ~ /ms$/) { sub("ms$", "", v); return v / 1000 } sub("s$", "", v); return v }
  BEGIN {
    n = split("net/http.HandlerFunc.ServeHTTP=HTTP handler chain;" \
      "k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Update=of it: managedFields update;" \
      "net/http.(*http2serverConn).serve=client connections (HTTP/2 loop);" \
      "github.com/hashicorp/raft.(*Raft).leaderLoop=raft leader loop;" \
      "github.com/hashicorp/raft.(*Raft).appendEntries=raft appendEntries (followers);" \
      "github.com/hashicorp/raft.(*NetworkTransport).handleConn=raft transport, receiving side;" \
      "github.com/hashicorp/raft.(*Raft).replicate=raft replication (leader);" \
      "github.com/trustplane/trustplane/cluster.(*Node).sendProposals=proposal frames sent;" \
      "github.com/trustplane/trustplane/cluster.(*Node).serveProposals=proposal frames served;" \
      "github.com/trustplane/trustplane/fsm.(*FSM).ApplyBatch=FSM apply;" \
      "syscall.Fsync=fsync;" \
      "syscall.write=socket and file writes (write(2));" \
      "syscall.read=socket reads (read(2));" \
      "runtime.futex=futex (thread wake-ups);" \
      "runtime.findRunnable=Go scheduler looking for work;" \
      "runtime.gcBgMarkWorker=GC mark workers", rows, ";")
    for (i = 1; i <= n; i++) { split(rows[i], kv, "="); name[kv[1]] = kv[2]; order[i] = kv[1] }
  }
  ($2 in name) { sum[$2] += secs($1) }
  END { for (i = 1; i <= n; i++) printf "  %-42s %7.1f\n", name[order[i]], sum[order[i]] / w * 1e6 }'
for p in "${profs[@]}"; do
  go tool pprof -top -nodecount=1 "$p" 2>/dev/null | grep -o 'Total samples = [0-9.]*m\?s' | awk '{print $4}'
done | awk -v w="$creates" '
  { v = $1; if (v ~ /ms$/) { sub("ms$", "", v); v /= 1000 } else sub("s$", "", v); t += v }
  END { printf "  %-42s %7.1f\n", "all samples", t / w * 1e6 }'
echo "profiles and results in $OUT"
