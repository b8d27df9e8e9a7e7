#!/usr/bin/env bash
# legacy-datadir.sh makes e2e/testdata/legacy-datadir-<commit>.tar.gz: a
# one-node data directory written by an earlier build (default de1512c, the
# last before fsm key spaces), which TestE2ELegacyDataDir starts this build
# on. Not part of make test; run it only to make a new fixture. It uses
# loopback ports 20443 and 20444 and stops the node it starts by PID.
set -euo pipefail
commit=${1:-de1512c}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; git -C "$root" worktree remove --force "$work/src" 2>/dev/null || true' EXIT
git -C "$root" worktree add -q "$work/src" "$commit"
(cd "$work/src" && go build -o "$work/trustplane" ./cmd/trustplane)
data=$work/data
export KUBECONFIG=$data/admin.kubeconfig

serve() {
	"$work/trustplane" serve --data-dir "$data" --listen 127.0.0.1:20443 --raft-addr 127.0.0.1:20444 --node-name legacy "$@" >>"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 60); do kubectl get --raw /readyz >/dev/null 2>&1 && return; sleep 1; done
	echo "node not ready" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" || true; }

# First part: taken into a raft snapshot (threshold 16).
serve --raft-snapshot-threshold 16 --raft-snapshot-interval 1s --raft-trailing-logs 1
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Namespace
metadata: {name: legacy}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: legacy}
data: {a: b}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterroles.rbac.authorization.k8s.io
  annotations: {api-approved.kubernetes.io: "https://github.com/kubernetes/kubernetes/pull/1"}
spec:
  group: rbac.authorization.k8s.io
  scope: Cluster
  names: {plural: clusterroles, singular: xclusterrole, kind: XClusterRole}
  versions:
  - {name: v9, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: signingkeys.trustplane.internal}
spec:
  group: trustplane.internal
  scope: Cluster
  names: {plural: signingkeys, singular: signingkey, kind: SigningKey}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
YAML
kubectl wait --for condition=Established crd --all --timeout=60s
kubectl apply -f - <<'YAML'
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: legacy}
spec: {size: 3}
YAML
kubectl create sa legacy -n legacy
kubectl create token legacy -n legacy --duration=87600h >"$data/token"
sleep 5 # the snapshot interval passes
stop

# Second part: in the log only.
serve
kubectl create --raw /debug/trustplane/signing-keys/rotate -f /dev/null
kubectl apply -f - <<'YAML'
apiVersion: example.com/v1
kind: Widget
metadata: {name: w2, namespace: legacy}
spec: {size: 4}
YAML
kubectl create cm cm2 -n legacy --from-literal=c=d
kubectl create token legacy -n legacy --duration=87600h >"$data/token2"
kubectl get widgets,cm -n legacy -o custom-columns=NAME:.metadata.name,RV:.metadata.resourceVersion
stop

rm -f "$data/raft/LOCK"
tar -C "$work" -czf "$root/e2e/testdata/legacy-datadir-$commit.tar.gz" data
echo "wrote e2e/testdata/legacy-datadir-$commit.tar.gz (update the resourceVersions in e2e/e2e_legacy_datadir_test.go)"
