#!/bin/bash
# A real single-node Kubernetes cluster next to the project's control plane recipe, offline:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy of the
# release testbed/k8s/go.mod pins (testbed/build.sh, cached); containerd 2.1 (CRI v1; Debian
# sid's package, unpacked, never installed: bookworm's 1.6 is older than this kubelet supports)
# with runc and the CNI plugins from Debian bookworm; images (pause, busybox, and any
# docker-archive tarballs given in $REALNODE_IMAGES) imported with `ctr images import` -- no
# registry. This machine's cgroups are v1: the kubelet is told `failCgroupV1: false`.
#
#   realnode.sh up      install packages, build (cached), start everything, wait for node Ready;
#                       prints the kubeconfig's path on its last line
#   realnode.sh down    stop everything `up` started, remove containers, netns, cgroups, iptables
#                       chains, bridge/route, and restore sysctls and directories as `up` found them
#   realnode.sh restart-apiserver [--compact]   stop the API server and start it again with the same
#                       flags (every client's watch breaks; resumed watches older than the new watch
#                       cache get 410); --compact compacts etcd to its current revision first
#   realnode.sh kill-container ID   SIGKILL a container's task, as the kernel's OOM killer would
# env: RN (work and cache dir, default ~/.cache/k8s-realnode), REALNODE_IMAGES (image tarballs to
#      import), AGG_ROUTING=1 (apiserver --enable-aggregator-routing=true)
# Addresses: service CIDR 10.213.0.0/24, pod CIDR 10.214.0.0/24 on bridge rnbr0 (10.214.0.1 = node IP);
# the API server listens on a random loopback port. No traffic leaves the machine.
# Adapted from the project's tested reference recipe for a real node.
set -euo pipefail
RN=${RN:-$HOME/.cache/k8s-realnode}
S=$RN/state; P=$S/pki; B0=$RN/baseline
IMG=$RN/images; PKG=$RN/pkgs
# containerd from Debian sid, unpacked: its binaries need only bookworm's glibc.
CONTAINERD_DEB=${CONTAINERD_DEB:-containerd=2.1.9+ds1-5}
SOCK=$RN/run/containerd/containerd.sock
CTR="$PKG/usr/bin/ctr -a $SOCK -n k8s.io"
NODE=realnode; NODE_IP=10.214.0.1; POD_CIDR=10.214.0.0/24; SVC_CIDR=10.213.0.0/24
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
 kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet
 net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables"
HOSTDIRS="/run/containerd /run/netns /var/lib/cni /var/lib/kubelet /var/log/pods /var/log/containers"
log() { echo "[$(date +%T)] $*" >&2; }
timed() { local t=$(date +%s); "$@"; log "  ($1: $(( $(date +%s)-t ))s)"; }

# ---------------------------------------------------------------- packages
install_pkgs() {
  local pk="runc containernetworking-plugins busybox-static conntrack buildah nftables gcc libc6-dev openssl curl python3 iptables"
  dpkg -s $pk >/dev/null 2>&1 || {
    apt-get update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pk >/dev/null
  }
  [[ -x $PKG/usr/bin/containerd ]] && return 0
  # sid through a private apt configuration: the system's sources stay untouched
  local A=$RN/apt; mkdir -p $A/lists/partial $A/parts $A/debs
  cat > $A/parts/sid.sources <<'EOS'
Types: deb
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
  local APTO=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$A/parts" -o "Dir::State::Lists=$A/lists")
  apt-get "${APTO[@]}" update >/dev/null
  (cd $A/debs && apt-get "${APTO[@]}" download "$CONTAINERD_DEB" >/dev/null 2>&1)
  rm -rf $PKG.tmp && dpkg-deb -x $A/debs/containerd_*.deb $PKG.tmp && rm -rf $PKG && mv $PKG.tmp $PKG
}

# ---------------------------------------------------------------- builds (cached)
# Every Kubernetes binary, kubectl and etcd included (cached).
build_k8s() { BIN=$("$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/build.sh" | tail -1); export PATH=$BIN:$PATH; }
build_images() {   # docker-archive tarballs: localhost/pause:3.10, localhost/busybox:1.35
  mkdir -p $IMG/pause $IMG/busybox
  local BA="buildah --root $RN/buildah/root --runroot $RN/buildah/run --storage-driver vfs"
  if [[ ! -f $IMG/pause.tar ]]; then
    # pause.c from the k8s.io/kubernetes module testbed/build.sh built from
    local src; src=$(cd "$(dirname "${BASH_SOURCE[0]}")/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
    gcc -Os -Wall -Werror -static -DVERSION=v3.10-realnode -o $IMG/pause/pause $src/build/pause/linux/pause.c
    strip $IMG/pause/pause
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > $IMG/pause/Containerfile
    $BA bud --isolation chroot -q -t localhost/pause:3.10 -f $IMG/pause/Containerfile $IMG/pause >/dev/null
    $BA push -q localhost/pause:3.10 docker-archive:$IMG/pause.tar:localhost/pause:3.10
  fi
  if [[ ! -f $IMG/busybox.tar ]]; then
    local RF=$IMG/busybox/rootfs a; rm -rf $RF; mkdir -p $RF/{bin,etc,tmp,www,root}
    cp /bin/busybox $RF/bin/busybox   # from busybox-static (note: its `wget` segfaults, use `nc`)
    for a in $(/bin/busybox --list); do [[ $a = busybox ]] || ln -sf busybox $RF/bin/$a; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > $RF/etc/passwd
    printf 'root:x:0:\nnobody:x:65534:\n' > $RF/etc/group; chmod 1777 $RF/tmp
    echo hello-from-realnode > $RF/www/index.html
    printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD ["sh"]\n' > $IMG/busybox/Containerfile
    $BA bud --isolation chroot -q -t localhost/busybox:1.35 -f $IMG/busybox/Containerfile $IMG/busybox >/dev/null
    $BA push -q localhost/busybox:1.35 docker-archive:$IMG/busybox.tar:localhost/busybox:1.35
  fi
}

# ---------------------------------------------------------------- baseline (recorded once, restored by down)
record_baseline() {
  [[ -f $B0/sysctl ]] && return 0
  mkdir -p $B0
  local s d; for s in $SYSCTLS; do echo "$s=$(sysctl -n $s)"; done > $B0/sysctl.tmp && mv $B0/sysctl.tmp $B0/sysctl
  for d in $HOSTDIRS; do [[ -e $d ]] && echo $d; done > $B0/dirs || true
  ip netns list 2>/dev/null | awk '{print $1}' > $B0/netns || true
  iptables-save > $B0/iptables; ip6tables-save > $B0/ip6tables
  nft list tables > $B0/nft-tables 2>/dev/null || true
  for d in /sys/fs/cgroup/*/; do [[ -d $d/kubepods ]] && echo $d/kubepods; [[ -d $d/k8s.io ]] && echo $d/k8s.io; done > $B0/cgroups || true
}

# ---------------------------------------------------------------- configs
write_configs() {
  mkdir -p $RN/containerd $RN/run/containerd $RN/cni/net.d $RN/cni/ipam
  cat > $RN/containerd/config.toml <<EOF
version = 2
root = "$RN/containerd/root"
state = "$RN/run/containerd"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.10"
  enable_selinux = false
  # this VM refuses negative oom_score_adj writes (EIO/EACCES); runc then fails with
  # "can't get final child's PID from pipe: EOF". Clamp to containerd's own score (0).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RN/cni/net.d"
EOF
  cat > $RN/cni/net.d/10-realnode.conflist <<EOF
{
  "cniVersion": "0.4.0",
  "name": "realnode",
  "plugins": [
    {"type": "bridge", "bridge": "rnbr0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$RN/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
}

# ---------------------------------------------------------------- control plane (adapted testbed/up.sh)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client_cert() { # name CN [O]
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2${3:+/O=$3}" -keyout "$P/$1.key" -out "$P/$1.csr" 2>/dev/null
  openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 30 ${4:+-extfile $4} \
    -out "$P/$1.crt" 2>/dev/null
}
kubeconfig() { # file user-stanza
  cat > "$S/$1" <<EOK
apiVersion: v1
kind: Config
clusters: [{name: realnode, cluster: {server: "https://$NODE_IP:$API", certificate-authority: "$P/ca.crt"}}]
users: [{name: u, user: $2}]
contexts: [{name: realnode, context: {cluster: realnode, user: u, namespace: default}}]
current-context: realnode
EOK
}
start_cp() {
  mkdir -p $P $S/etcd
  if [[ ! -f $P/ca.crt ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=realnode-ca -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.213.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' "$NODE_IP" > $P/apiserver.ext
    client_cert apiserver kube-apiserver "" $P/apiserver.ext
    openssl genrsa -out "$P/sa.key" 2048 2>/dev/null && openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
    echo "admin-token,admin,admin,system:masters" > "$P/tokens.csv"
    client_cert node system:node:$NODE system:nodes
    client_cert proxy system:kube-proxy
    client_cert scheduler system:kube-scheduler
  fi
  local ETCD PEER; ETCD=$(free_port); PEER=$(free_port); API=$(free_port)
  "$BIN/etcd" --data-dir "$S/etcd" --listen-client-urls "http://127.0.0.1:$ETCD" --advertise-client-urls "http://127.0.0.1:$ETCD" \
    --listen-peer-urls "http://127.0.0.1:$PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PEER" \
    --initial-cluster "default=http://127.0.0.1:$PEER" >"$S/etcd.log" 2>&1 &
  echo $! > $S/etcd.pid
  local AGG=(); [[ ${AGG_ROUTING:-0} = 1 ]] && AGG=(--enable-aggregator-routing=true)
  "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD" --bind-address=$NODE_IP --advertise-address=$NODE_IP \
    --secure-port="$API" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" --token-auth-file="$P/tokens.csv" \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$P/sa.pub" \
    --service-account-signing-key-file="$P/sa.key" --api-audiences=https://kubernetes.default.svc \
    --service-cluster-ip-range=$SVC_CIDR --authorization-mode=Node,RBAC --allow-privileged=true \
    --enable-admission-plugins=NodeRestriction --kubelet-preferred-address-types=InternalIP "${AGG[@]}" \
    --cert-dir="$S/certs" >"$S/apiserver.log" 2>&1 &
  echo $! > $S/apiserver.pid
  kubeconfig kubeconfig "{token: admin-token}"
  kubeconfig kubelet.kubeconfig "{client-certificate: $P/node.crt, client-key: $P/node.key}"
  kubeconfig proxy.kubeconfig "{client-certificate: $P/proxy.crt, client-key: $P/proxy.key}"
  kubeconfig scheduler.kubeconfig "{client-certificate: $P/scheduler.crt, client-key: $P/scheduler.key}"
  local i; for i in $(seq 1 120); do
    curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' "https://$NODE_IP:$API/readyz" >/dev/null 2>&1 && break
    sleep 0.5
  done
  curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' "https://$NODE_IP:$API/readyz" >/dev/null \
    || { log "apiserver did not become ready; see $S/apiserver.log"; exit 1; }
  "$BIN/kube-controller-manager" --kubeconfig="$S/kubeconfig" --leader-elect=false --use-service-account-credentials=false \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --secure-port=0 --controllers='*' \
    --concurrent-deployment-syncs=10 --concurrent-replicaset-syncs=10 --kube-api-qps=200 --kube-api-burst=400 \
    >"$S/controller-manager.log" 2>&1 &
  echo $! > $S/controller-manager.pid
  $BIN/kube-scheduler --kubeconfig="$S/scheduler.kubeconfig" --leader-elect=false --secure-port=0 \
    >"$S/scheduler.log" 2>&1 &
  echo $! > $S/scheduler.pid
  for i in $(seq 1 60); do
    kubectl --kubeconfig $S/kubeconfig get serviceaccount default >/dev/null 2>&1 && break; sleep 0.5
  done
}

# ---------------------------------------------------------------- node: containerd, kubelet, kube-proxy
# The bridge first: CNI's bridge plugin reuses it, and its address is the node IP (the kubelet refuses
# a loopback node IP) and the API server's, which pods reach through the kubernetes Service.
bridge_up() {
  ip link show rnbr0 >/dev/null 2>&1 || ip link add rnbr0 type bridge
  ip addr show dev rnbr0 | grep -q "$NODE_IP/24" || ip addr add $NODE_IP/24 dev rnbr0
  ip link set rnbr0 up
  # ClusterIPs are routed onto the bridge, so nothing for the service range ever leaves via eth0 (even before
  # kube-proxy has synced); kube-proxy DNATs them in OUTPUT/PREROUTING.
  ip route replace $SVC_CIDR dev rnbr0
  sysctl -qw net.ipv4.ip_forward=1
}

# A second name for busybox, so that a sidecar's image can change without a registry (the
# in-place upgrade test): the same content under localhost/busybox:next.
tag_images() {
  $CTR images tag --force localhost/busybox:1.35 localhost/busybox:next >/dev/null
}

start_node() {
  if ! $PKG/usr/bin/ctr -a $SOCK version >/dev/null 2>&1; then
    PATH=$PKG/usr/bin:$PATH $PKG/usr/bin/containerd --config $RN/containerd/config.toml > $S/containerd.log 2>&1 &
    echo $! > $S/containerd.pid
    local i; for i in $(seq 1 40); do $PKG/usr/bin/ctr -a $SOCK version >/dev/null 2>&1 && break; sleep 0.25; done
  fi
  local im; for im in $IMG/pause.tar $IMG/busybox.tar ${REALNODE_IMAGES:-}; do $CTR images import "$im" >/dev/null; done
  tag_images
  mkdir -p $S/kubelet
  cat > $S/kubelet-config.yaml <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
podCIDR: $POD_CIDR
clusterDomain: cluster.local
# absolute floors: a percentage of a large, busy build disk evicts every pod mid-test
evictionHard: {memory.available: "100Mi", nodefs.available: "1Gi", imagefs.available: "1Gi", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 30s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
makeIPTablesUtilChains: true
protectKernelDefaults: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
# this machine's cgroups are v1, which kubelets since 1.35 refuse unless told
failCgroupV1: false
EOC
  $BIN/kubelet --config=$S/kubelet-config.yaml --kubeconfig=$S/kubelet.kubeconfig \
    --hostname-override=$NODE --node-ip=$NODE_IP --root-dir=$S/kubelet --cert-dir=$S/kubelet/pki \
    --register-node=true --v=2 > $S/kubelet.log 2>&1 &
  echo $! > $S/kubelet.pid
  # --conntrack-*=0: leave the host's conntrack sysctls alone
  $BIN/kube-proxy --kubeconfig=$S/proxy.kubeconfig --hostname-override=$NODE --proxy-mode=iptables \
    --cluster-cidr=$POD_CIDR --bind-address=127.0.0.1 --healthz-bind-address=127.0.0.1:10256 \
    --metrics-bind-address=127.0.0.1:10249 --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 \
    --conntrack-tcp-timeout-close-wait=0 --v=2 > $S/kube-proxy.log 2>&1 &
  echo $! > $S/kube-proxy.pid
  for i in $(seq 1 120); do kubectl --kubeconfig $S/kubeconfig get node $NODE >/dev/null 2>&1 && break; sleep 0.5; done
  kubectl --kubeconfig $S/kubeconfig wait --for=condition=Ready node/$NODE --timeout=120s
}

up() {
  if [[ -f $S/apiserver.pid ]] && kill -0 "$(cat $S/apiserver.pid)" 2>/dev/null; then
    log "already up; importing \$REALNODE_IMAGES again"
    local im; for im in ${REALNODE_IMAGES:-}; do $CTR images import "$im" >/dev/null; done
    tag_images
    echo "$S/kubeconfig"; return 0
  fi
  log "installing Debian packages (if missing)"; timed install_pkgs
  log "Kubernetes binaries (testbed/build.sh, cached)"; timed build_k8s
  log "images (cached in $IMG)"; timed build_images
  record_baseline; write_configs
  bridge_up
  log "starting control plane"; timed start_cp
  log "starting containerd, kubelet, kube-proxy"; timed start_node
  kubectl --kubeconfig $S/kubeconfig version >&2
  kubectl --kubeconfig $S/kubeconfig get nodes -o wide >&2
  echo "$S/kubeconfig"
}

# ---------------------------------------------------------------- verification
stop_pid() { # pidfile [timeout_s]
  [[ -f $1 ]] || return 0
  local p name; p=$(cat $1); name=$(basename $1 .pid)
  # guard against a recycled PID: only signal it if it still is our process
  if kill -0 $p 2>/dev/null && tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q -- "$name"; then
    kill $p; local i; for i in $(seq 1 $(( ${2:-15} * 10 ))); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
    kill -0 $p 2>/dev/null && kill -9 $p
  fi
  rm -f $1
}
drop_chains() { # iptables|ip6tables: remove every KUBE-*/CNI-* chain and the rules jumping to them
  local ipt=$1 t rule ch
  for t in filter nat mangle raw; do
    $ipt-save -t $t 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | sed 's/^-A /-D /' | while read -r rule; do
      eval "$ipt -t $t $rule" 2>/dev/null || true; done
    for ch in $($ipt-save -t $t 2>/dev/null | grep -oE '^:(KUBE|CNI)-[^ ]+' | cut -c2-); do $ipt -t $t -F $ch 2>/dev/null || true; done
    for ch in $($ipt-save -t $t 2>/dev/null | grep -oE '^:(KUBE|CNI)-[^ ]+' | cut -c2-); do $ipt -t $t -X $ch 2>/dev/null || true; done
  done
}
down() {
  set +e +o pipefail   # best effort: never stop half-way
  # `up` records the host's state before it changes anything; without that record it changed
  # nothing (or `down` already ran), and the host's own directories must not be touched.
  if [[ ! -f $B0/sysctl ]]; then log "not up; nothing to take down"; return 0; fi
  export KUBECONFIG=$S/kubeconfig
  if [[ -f $S/kubelet.pid ]] && kill -0 "$(cat $S/kubelet.pid)" 2>/dev/null && kubectl get --raw /readyz >/dev/null 2>&1; then
    log "deleting workloads through the API so that kubelet tears pods down (CNI DEL, netns removal)"
    kubectl delete mutatingwebhookconfiguration --all --wait=false >/dev/null 2>&1 || true
    kubectl delete deploy,rs,ds,sts,job --all -A --wait=false >/dev/null 2>&1 || true
    kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
    local i; for i in $(seq 1 60); do [[ -z $($CTR tasks ls -q 2>/dev/null) ]] && break; sleep 1; done
  fi
  log "stopping kube-proxy, kubelet, scheduler, controller-manager, apiserver, etcd"
  stop_pid $S/kube-proxy.pid; stop_pid $S/kubelet.pid
  stop_pid $S/scheduler.pid; stop_pid $S/controller-manager.pid; stop_pid $S/apiserver.pid 20; stop_pid $S/etcd.pid
  if [[ -S $SOCK ]] && timeout 5 $PKG/usr/bin/ctr -a $SOCK version >/dev/null 2>&1; then
    log "removing leftover containers"
    local id; for id in $($CTR tasks ls -q 2>/dev/null); do $CTR tasks kill -s SIGKILL $id >/dev/null 2>&1 || true; done
    sleep 1
    for id in $($CTR tasks ls -q 2>/dev/null); do $CTR tasks delete -f $id >/dev/null 2>&1 || true; done
    for id in $($CTR containers ls -q 2>/dev/null); do $CTR containers delete $id >/dev/null 2>&1 || true; done
  fi
  stop_pid $S/containerd.pid
  log "unmounting, removing netns, cgroups, iptables chains, bridge; restoring sysctls and directories"
  local m; for m in $(findmnt -rn -o TARGET | grep -E "^($RN/|/run/containerd/)" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  local ns; for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-'); do
    grep -qx "$ns" $B0/netns 2>/dev/null || ip netns delete $ns 2>/dev/null || true; done
  local d cg; for cg in kubepods k8s.io; do for d in /sys/fs/cgroup/*/$cg; do
    [[ -d $d ]] && ! grep -qx "$d" $B0/cgroups 2>/dev/null && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done; done
  drop_chains iptables; drop_chains ip6tables
  # iptables-nft leaves its (now empty) nf_tables tables behind; drop the ones that did not exist before and are empty
  if command -v nft >/dev/null && [[ -f $B0/nft-tables ]]; then
    local fam tb; nft list tables 2>/dev/null | while read -r _ fam tb; do
      grep -qx "table $fam $tb" $B0/nft-tables && continue
      nft list table $fam $tb 2>/dev/null | grep -vqE '^\s*(table|chain|type|policy|\}|$)' \
        || nft delete table $fam $tb 2>/dev/null || true
    done
  fi
  ip link show rnbr0 >/dev/null 2>&1 && ip link del rnbr0
  local v; for v in $(ip -o link show type veth 2>/dev/null | awk -F'[ :@]+' '{print $2}' | grep '^veth'); do
    ip -d link show $v | grep -q 'master rnbr0' && ip link del $v || true; done
  if [[ -f $B0/sysctl ]]; then
    local kv; while IFS= read -r kv; do sysctl -qw "$kv" 2>/dev/null || true; done < $B0/sysctl
  fi
  for d in $HOSTDIRS; do grep -qx "$d" $B0/dirs 2>/dev/null || rm -rf "$d"; done
  rm -rf $RN/containerd/root $RN/run $RN/cni/ipam $S $B0
  log "down"
}

restart_apiserver() {
  local pid; pid=$(cat $S/apiserver.pid)
  local -a cmd; mapfile -d '' cmd < /proc/$pid/cmdline
  local port; port=$(printf '%s\n' "${cmd[@]}" | sed -n 's/^--secure-port=//p')
  if [[ ${1:-} = --compact ]]; then
    local etcd rev; etcd=$(printf '%s\n' "${cmd[@]}" | sed -n 's/^--etcd-servers=//p')
    rev=$(curl -sf -X POST "$etcd/v3/kv/range" -d '{"key":"AA=="}' \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
    log "compacting etcd to revision $rev"
    curl -sf -X POST "$etcd/v3/kv/compaction" -d "{\"revision\": \"$rev\", \"physical\": true}" >/dev/null
  fi
  log "restarting the apiserver (pid $pid, port $port)"
  stop_pid $S/apiserver.pid 20
  "${cmd[@]}" >>"$S/apiserver.log" 2>&1 </dev/null &
  echo $! > $S/apiserver.pid
  local i; for i in $(seq 1 120); do
    curl -sf --cacert "$P/ca.crt" -H 'Authorization: Bearer admin-token' "https://$NODE_IP:$port/readyz" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "apiserver did not become ready again; see $S/apiserver.log"; exit 1
}

case ${1:-} in
  up) up ;;
  down) down ;;
  restart-apiserver) restart_apiserver "${2:-}" ;;
  kill-container) $CTR tasks kill -s SIGKILL "${2:?container id}" ;;
  *) echo "usage: $0 up|down|restart-apiserver|kill-container ID" >&2; exit 2 ;;
esac
