#!/usr/bin/env bash
# upgrade-test.sh: a rolling upgrade from an earlier build to this tree, a
# rollback of one node and forward again, under the chaos workload and its
# checkers (issue 33), then each build's backup restored by the other.
#
#   UPGRADE_FROM   the earlier build: a tag or a commit (default: the
#                  Makefile's pin, passed in by make upgrade-test)
#   UPGRADE_DIR    where binaries, data, logs and the chaos report go
#                  (default bin/upgrade/<time>)
#   UPGRADE_DURATION, UPGRADE_PORT  the chaos run's length (150s) and the
#                  first of the loopback ports it uses (24443)
#
# Three nodes start on the earlier build. `trustplane chaos attach` (this
# tree's) runs its workload (linearizable writes and reads, watches, tokens,
# CSRs) and restarts the whole cluster again and again, followers first and
# the leader last (its "rolling" fault), through a start script that picks
# each node's binary from a plan: every node moves to the new build at its
# first restart; n1 goes back to the earlier build at its second and
# forward again at its third. The run must pass every checker: no
# acknowledged write lost, linearizable reads and writes across both
# builds, watches resumed across them. Then a backup taken by the earlier
# build (before the upgrade) is restored and served by the new one, and a
# backup taken by the new build (after it) by the earlier one, with an
# object written by the other build on each.
#
# Every process it starts it stops, by PID; every wait is bounded.
set -euo pipefail

FROM=${UPGRADE_FROM:?UPGRADE_FROM: the earlier build, a tag or a commit}
DIR=${UPGRADE_DIR:-bin/upgrade/$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${UPGRADE_DURATION:-150s}
BASE=${UPGRADE_PORT:-24443}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
NEW=$DIR/trustplane-new
OLD=$DIR/trustplane-old
NODES=(n1 n2 n3)
pids=()

stop_pids() { # stop_pids PIDFILE...: SIGTERM, then SIGKILL after 30 s
  local f p
  for f in "$@"; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    kill "$p" 2>/dev/null || continue
    for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}
cleanup() {
  stop_pids "$DIR"/*/pid
  local p
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  git worktree remove --force "$DIR/old-src" 2>/dev/null || true
}
trap cleanup EXIT

echo "== building $FROM and this tree into $DIR"
git worktree add --detach --force "$DIR/old-src" "$FROM" >/dev/null
(cd "$DIR/old-src" && CGO_ENABLED=0 go build -o "$OLD" ./cmd/trustplane)
git worktree remove --force "$DIR/old-src"
CGO_ENABLED=0 go build -o "$NEW" ./cmd/trustplane
echo "earlier: $("$OLD" version)"
echo "new:     $("$NEW" version)"

"$NEW" certs init --dir "$DIR/ca" >/dev/null
seeds=""
for i in "${!NODES[@]}"; do seeds+="${seeds:+,}127.0.0.1:$((BASE + 10 * i + 2))"; done
args=()
for i in "${!NODES[@]}"; do
  n=${NODES[$i]} p=$((BASE + 10 * i)) d=$DIR/$n
  mkdir -p "$d/data"
  # The plan: the binary of each start, in order; past its end the last.
  if [ "$n" = n1 ]; then printf '%s\n' "$OLD" "$NEW" "$OLD" "$NEW" >"$d/plan"; else printf '%s\n' "$OLD" "$NEW" >"$d/plan"; fi
  echo 0 >"$d/starts"
  cat >"$d/start.sh" <<EOF
#!/bin/sh
c=\$(cat "$d/starts"); echo \$((c + 1)) >"$d/starts"
bin=\$(sed -n "\$((c + 1))p" "$d/plan"); [ -n "\$bin" ] || bin=\$(tail -n 1 "$d/plan")
echo "\$(date -u +%T) start \$((c + 1)): \$(basename "\$bin")" >>"$d/builds.log"
"\$bin" serve --node-name $n --data-dir "$d/data" --ca-dir "$DIR/ca" \\
  --listen 127.0.0.1:$p --raft-addr 127.0.0.1:$((p + 1)) --gossip-addr 127.0.0.1:$((p + 2)) \\
  --bootstrap-expect 3 --join $seeds >>"$d/trustplane.log" 2>&1 &
echo \$! >"$d/pid"
EOF
  cat >"$d/stop.sh" <<EOF
#!/bin/sh
p=\$(cat "$d/pid")
kill "\$p" 2>/dev/null || exit 0
i=0
while kill -0 "\$p" 2>/dev/null && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
kill -9 "\$p" 2>/dev/null || true
EOF
  chmod +x "$d/start.sh" "$d/stop.sh"
  "$d/start.sh"
  args+=(--kubeconfig "$n=$d/data/admin.kubeconfig" --kill "$n=$d/stop.sh" --restart "$n=$d/start.sh")
done
for n in "${NODES[@]}"; do
  for _ in $(seq 600); do [ -f "$DIR/$n/data/admin.kubeconfig" ] && break; sleep 0.2; done
  [ -f "$DIR/$n/data/admin.kubeconfig" ] || { echo "$n did not start; see $DIR/$n/trustplane.log" >&2; exit 1; }
done
kc=$DIR/n1/data/admin.kubeconfig

kube() { kubectl --kubeconfig "$1" "${@:2}"; }
wait_api() { # wait_api KUBECONFIG: /readyz answers 200
  for _ in $(seq 600); do kube "$1" get --raw /readyz >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "the API at $1 did not become ready" >&2
  return 1
}
wait_api "$kc"
kube "$kc" create configmap written-by-earlier --from-literal=build=earlier >/dev/null
"$OLD" snapshot save --kubeconfig "$kc" -o "$DIR/earlier.snap" >/dev/null

echo "== the chaos workload through the upgrade, a rollback of n1 and forward again ($DURATION)"
"$NEW" chaos attach --duration "$DURATION" --quiet 8s --faults rolling --out "$DIR/chaos" "${args[@]}" | tee "$DIR/chaos.txt"
grep -q "trustplane chaos: PASS" "$DIR/chaos.txt" || { echo "the chaos run did not pass" >&2; exit 1; }
for n in "${NODES[@]}"; do echo "$n: $(tr '\n' ' ' <"$DIR/$n/builds.log")"; done
grep -q "start 3: trustplane-old" "$DIR/n1/builds.log" && grep -q "start 4: trustplane-new" "$DIR/n1/builds.log" ||
  { echo "the run ended before n1 went back to the earlier build and forward again: lengthen UPGRADE_DURATION" >&2; exit 1; }
for n in n2 n3; do
  [ "$(tail -n 1 "$DIR/$n/builds.log" | sed 's/.*: //')" = trustplane-new ] || { echo "$n does not run the new build" >&2; exit 1; }
done
"$NEW" members --kubeconfig "$kc"

# Each build's backup restored and served by the other build.
wait_api "$kc"
kube "$kc" create configmap written-by-new --from-literal=build=new >/dev/null
"$NEW" snapshot save --kubeconfig "$kc" -o "$DIR/new.snap" >/dev/null
restore() { # restore BIN FILE NAME PORT WANT...: BIN restores FILE and serves each WANT
  local bin=$1 file=$2 name=$3 p=$4 d=$DIR/$3
  shift 4
  "$bin" snapshot restore --file "$file" --data-dir "$d/data" --node-name "$name" --raft-addr "127.0.0.1:$((p + 1))" >/dev/null
  "$bin" serve --node-name "$name" --data-dir "$d/data" --ca-dir "$DIR/ca" --listen "127.0.0.1:$p" \
    --raft-addr "127.0.0.1:$((p + 1))" --gossip-addr "127.0.0.1:$((p + 2))" >"$d/trustplane.log" 2>&1 &
  echo $! >"$d/pid"
  for _ in $(seq 600); do [ -f "$d/data/admin.kubeconfig" ] && break; sleep 0.2; done
  wait_api "$d/data/admin.kubeconfig"
  local cm
  for cm in "$@"; do
    kube "$d/data/admin.kubeconfig" get configmap "$cm" -o jsonpath='{.data.build}' >/dev/null ||
      { echo "$(basename "$bin") restoring $(basename "$file") does not serve $cm" >&2; exit 1; }
  done
  echo "$(basename "$bin") restored $(basename "$file") and serves $*"
  stop_pids "$d/pid"
}
restore "$NEW" "$DIR/earlier.snap" restored-new $((BASE + 100)) written-by-earlier
restore "$OLD" "$DIR/new.snap" restored-earlier $((BASE + 110)) written-by-earlier written-by-new
echo "upgrade-test: PASS ($FROM -> this tree, results in $DIR)"
