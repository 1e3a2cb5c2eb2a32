#!/bin/bash
# Starts a real, single-host Kubernetes control plane on loopback: etcd, kube-apiserver and
# kube-controller-manager (built by build.sh from the release testbed/k8s/go.mod pins). There is no kubelet, scheduler or network: pods are
# stored and controllers act on them, but nothing runs them (a test "kubelet" has to mark them Ready).
#   usage: up.sh STATE_DIR [BIN_DIR]
#   K8S_TESTBED_CM_QPS (default 200) is the controller-manager's --kube-api-qps, its burst twice that.
#   K8S_TESTBED_APISERVER_ARGS: further kube-apiserver flags (a test tracing the API server).
# Writes STATE_DIR/kubeconfig (cluster-admin token), STATE_DIR/pki/ca.{crt,key} (a CA the tests can use
# to sign a webhook's serving certificate), logs and pid files; down.sh STATE_DIR stops it.
set -euo pipefail
S=$(mkdir -p "$1" && cd "$1" && pwd)
BIN=${2:-${K8S_TESTBED_BIN:-$("$(dirname "$0")/build.sh")}}
P=$S/pki; mkdir -p "$P" "$S/etcd"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD=$(free_port); PEER=$(free_port); API=$(free_port)
if [[ ! -f $P/ca.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=testbed-ca -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$P/apiserver.key" -out "$P/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > "$P/apiserver.ext"
  openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 30 \
    -extfile "$P/apiserver.ext" -out "$P/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null && openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  echo "admin-token,admin,admin,system:masters" > "$P/tokens.csv"
fi
ETCD_BIN=etcd; [[ -x $BIN/etcd ]] && ETCD_BIN=$BIN/etcd
"$ETCD_BIN" --data-dir "$S/etcd" --listen-client-urls "http://127.0.0.1:$ETCD" --advertise-client-urls "http://127.0.0.1:$ETCD" \
  --listen-peer-urls "http://127.0.0.1:$PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PEER" \
  --initial-cluster "default=http://127.0.0.1:$PEER" >"$S/etcd.log" 2>&1 &
echo $! > "$S/etcd.pid"
# Loopback as the advertised address: 1.37 refuses it to its endpoint reconciler, which keeps the
# `kubernetes` Service's endpoints (nothing here runs pods that would use them).
"$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --endpoint-reconciler-type=none \
  --secure-port="$API" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$P/sa.pub" \
  --service-account-signing-key-file="$P/sa.key" --api-audiences=https://kubernetes.default.svc \
  --service-cluster-ip-range=10.96.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=true \
  --cert-dir="$S/certs" ${K8S_TESTBED_APISERVER_ARGS:-} >"$S/apiserver.log" 2>&1 &
echo $! > "$S/apiserver.pid"
cat > "$S/kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters: [{name: testbed, cluster: {server: "https://127.0.0.1:$API", certificate-authority: "$P/ca.crt"}}]
users: [{name: admin, user: {token: admin-token}}]
contexts: [{name: testbed, context: {cluster: testbed, user: admin, namespace: default}}]
current-context: testbed
EOK
for _ in $(seq 1 120); do
  curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' "https://127.0.0.1:$API/readyz" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' "https://127.0.0.1:$API/readyz" >/dev/null \
  || { echo "k8s-testbed: kube-apiserver did not become ready; see $S/apiserver.log" >&2; exit 1; }
"$BIN/kube-controller-manager" --kubeconfig="$S/kubeconfig" --leader-elect=false --use-service-account-credentials=false \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --secure-port=0 --controllers='*' \
  --concurrent-deployment-syncs=10 --concurrent-replicaset-syncs=10 --kube-api-qps="${K8S_TESTBED_CM_QPS:-200}" --kube-api-burst="$(( 2 * ${K8S_TESTBED_CM_QPS:-200} ))" \
  >"$S/controller-manager.log" 2>&1 &
echo $! > "$S/controller-manager.pid"
# the ServiceAccount admission plugin rejects pods until the ServiceAccount controller has made default
for _ in $(seq 1 60); do
  curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' \
    "https://127.0.0.1:$API/api/v1/namespaces/default/serviceaccounts/default" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "$S/kubeconfig"
