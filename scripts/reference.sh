#!/usr/bin/env bash
# reference.sh start|stop|status: the reference side of trustplane bench,
# upstream etcd + kube-apiserver + kube-controller-manager on loopback, built
# by "make reference" into bin/reference from the reference/ module
# (docs/BENCHMARKS.md). Certificates, etcd's data, pid files and logs live in
# REFERENCE_DIR (bin/reference/run by default). "stop" ends exactly the
# processes "start" began, by the PIDs it recorded.
set -euo pipefail

BIN=${REFERENCE_BIN:-./bin/reference}
DIR=${REFERENCE_DIR:-$BIN/run}
ETCD_PORT=${REFERENCE_ETCD_PORT:-12379}
ETCD_PEER_PORT=${REFERENCE_ETCD_PEER_PORT:-12380}
APISERVER_PORT=${REFERENCE_APISERVER_PORT:-16443}
KCM_PORT=${REFERENCE_KCM_PORT:-10357}
SERVICE_CIDR=${REFERENCE_SERVICE_CIDR:-10.96.0.0/12}
SERVICE_IP=${REFERENCE_SERVICE_IP:-10.96.0.1}
ISSUER=${REFERENCE_SA_ISSUER:-https://kubernetes.default.svc.cluster.local}
READY_TIMEOUT=${REFERENCE_READY_TIMEOUT:-120}
# Each controller client's rate limit: trustplane's defaults
# (--controllers-api-qps, --controllers-api-burst), not
# kube-controller-manager's 20 and 30, which would cap the CSR signer, one
# status update per certificate, near 20 certificates a second.
KCM_QPS=${REFERENCE_KCM_QPS:-1000}
KCM_BURST=${REFERENCE_KCM_BURST:-2000}
# The controllers trustplane runs itself (api/controllers), by their
# kube-controller-manager names: all of them need no nodes or kubelets.
CONTROLLERS=serviceaccount,serviceaccount-token,root-ca-cert-publisher,clusterrole-aggregation,csrsigning,csrapproving,csrcleaner,garbagecollector,namespace

COMPONENTS=(etcd kube-apiserver kube-controller-manager)

# running NAME: the recorded pid of NAME is alive and runs our binary (a
# pid file left by a crash must not name some later, unrelated process).
# A rebuild replaces the file under a running process: its exe then reads
# "<path> (deleted)".
running() {
  local pidfile="$DIR/$1.pid" pid exe
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$(readlink -f "$BIN/$1")" ]
}

# launch NAME ARGS...: start $BIN/NAME in the background, log to the run
# dir, record its pid.
launch() {
  local name=$1
  shift
  if running "$name"; then
    echo "$name is already running (pid $(cat "$DIR/$name.pid"))"
    return
  fi
  "$BIN/$name" "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

# wait_for NAME SECONDS CHECK...: poll CHECK every 0.5 s until it succeeds,
# NAME exits or SECONDS pass.
wait_for() {
  local name=$1 secs=$2
  shift 2
  local i
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! running "$name"; then
      echo "$name exited; see $DIR/$name.log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "$name was not ready after $secs s; see $DIR/$name.log" >&2
  return 1
}

curl_ok() {
  curl -fsS --max-time 5 "$@"
}

start() {
  for c in "${COMPONENTS[@]}" reference-certs; do
    [ -x "$BIN/$c" ] || { echo "$BIN/$c is missing; run make reference" >&2; exit 1; }
  done
  mkdir -p "$DIR"
  local server="https://127.0.0.1:$APISERVER_PORT"
  "$BIN/reference-certs" --dir "$DIR/pki" --server "$server" --service-ip "$SERVICE_IP"
  local pki="$DIR/pki"
  # Keep the kubeconfigs next to the logs, where the docs point.
  cp "$pki/admin.kubeconfig" "$DIR/admin.kubeconfig"
  chmod 600 "$DIR/admin.kubeconfig"

  # etcd: one member, client and peer on loopback, client TLS with
  # client-certificate auth and the flags kubeadm v1.33 gives it (less
  # peer TLS: there are no peers).
  launch etcd \
    --name reference --data-dir "$DIR/etcd" \
    --listen-client-urls "https://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "reference=http://127.0.0.1:$ETCD_PEER_PORT" \
    --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" \
    --trusted-ca-file "$pki/etcd-ca.crt" --client-cert-auth \
    --snapshot-count 10000 \
    --experimental-initial-corrupt-check \
    --experimental-watch-progress-notify-interval 5s
  wait_for etcd 60 curl_ok --cacert "$pki/etcd-ca.crt" \
    --cert "$pki/apiserver-etcd-client.crt" --key "$pki/apiserver-etcd-client.key" \
    "https://127.0.0.1:$ETCD_PORT/health"

  # kube-apiserver: RBAC only (Node needs nodes), ServiceAccount tokens
  # signed with sa.key, client certificates from the cluster CA, nothing
  # kubelet-related. No endpoint reconciler: 127.0.0.1 is no valid
  # Endpoints address, and no pod will dial the kubernetes Service.
  launch kube-apiserver \
    --bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --etcd-servers "https://127.0.0.1:$ETCD_PORT" \
    --etcd-cafile "$pki/etcd-ca.crt" \
    --etcd-certfile "$pki/apiserver-etcd-client.crt" --etcd-keyfile "$pki/apiserver-etcd-client.key" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode RBAC \
    --service-account-issuer "$ISSUER" --api-audiences "$ISSUER" \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR"
  local admin=(--cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key")
  wait_for kube-apiserver "$READY_TIMEOUT" curl_ok "${admin[@]}" "$server/readyz"

  # kube-controller-manager: the CSR signers sign with the cluster CA (as
  # kubeadm's --cluster-signing-cert-file), the tokens controller with
  # sa.key; each controller acts as its own ServiceAccount, as trustplane's
  # controllers do. No --authentication/--authorization-kubeconfig: its
  # own port serves only /healthz here, and delegated authentication would
  # look for a request-header CA this apiserver does not have.
  launch kube-controller-manager \
    --kubeconfig "$pki/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --leader-elect=false \
    --kube-api-qps "$KCM_QPS" --kube-api-burst "$KCM_BURST" \
    --controllers "$CONTROLLERS" \
    --use-service-account-credentials \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --root-ca-file "$pki/ca.crt" \
    --service-account-private-key-file "$pki/sa.key"
  wait_for kube-controller-manager 60 curl_ok -k "https://127.0.0.1:$KCM_PORT/healthz"

  echo "etcd, kube-apiserver and kube-controller-manager are running (logs in $DIR)."
  echo "  export KUBECONFIG=$(readlink -f "$DIR/admin.kubeconfig")"
  echo "stop them with: make reference-stop"
}

stop() {
  local pids=()
  # The reverse of start: the controller manager, the API, then etcd.
  for c in kube-controller-manager kube-apiserver etcd; do
    local pidfile="$DIR/$c.pid" pid
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if running "$c"; then
      kill -TERM "$pid"
      pids+=("$pid")
      local i
      for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        echo "$c (pid $pid) did not stop after 15 s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$pidfile"
  done
  echo "stopped ${#pids[@]} process(es)"
}

status() {
  local down=0
  for c in "${COMPONENTS[@]}"; do
    if running "$c"; then
      echo "$c: running (pid $(cat "$DIR/$c.pid"))"
    else
      echo "$c: stopped"
      down=1
    fi
  done
  return $down
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
