#!/bin/bash
# Starts a one-node Kubernetes cluster for the k8s tier, from binaries you supply, inside a network
# namespace of its own (the machine's routes, iptables and nftables stay untouched).
#
# Usage: KUBE_BIN=DIR tests/k8s_tier/node-up.sh        stop: tests/k8s_tier/node-down.sh
#   KUBE_BIN  holds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#             and kubectl (v1.28 was used, see docs/k8s-tier.md)
# Env (defaults): NODE_NETNS (vswk8s), NODE_IP (192.168.16.1), STATE (/var/lib/vswitch-k8s),
#   RUNDIR (/run/vswk8s). Needs etcd, containerd 1.6, runc, openssl on the machine, and
#   /opt/cni/bin/{loopback,portmap} (copied from Debian's /usr/lib/cni when missing).
# Images: no registry is needed if `pause` (registry.k8s.io/pause:3.9) and the tier's images are
#   imported with `ctr -a $RUNDIR/containerd.sock -n k8s.io images import`.
# Prints the environment for the tier (VSWITCH_TEST_KUBECONFIG and friends).
set -euo pipefail
: "${KUBE_BIN:?KUBE_BIN must name the directory of the Kubernetes binaries}"
NS=${NODE_NETNS:-vswk8s} IP=${NODE_IP:-192.168.16.1}
STATE=${STATE:-/var/lib/vswitch-k8s} RUNDIR=${RUNDIR:-/run/vswk8s}
NODE=$NS-node PKI=$STATE/pki LOGS=$STATE/logs
mkdir -p "$PKI" "$LOGS" "$RUNDIR" /opt/cni/bin
in_ns() { nsenter --net="/var/run/netns/$NS" "$@"; }
start() {  # name, command...: runs it in the node namespace, logs and pid under STATE/RUNDIR
    local name=$1; shift
    setsid nsenter --net="/var/run/netns/$NS" "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$RUNDIR/$name.pid"
}

# The node: lo, its address on an ifb (no dummy driver on some kernels), a route for Services
# (locally originated connections need a route before kube-proxy's DNAT), forwarding on.
ip netns add "$NS"
in_ns ip link set lo up
in_ns ip link add node0 type ifb
in_ns ip addr add "$IP/24" dev node0
in_ns ip link set node0 up
in_ns ip route add 10.96.0.0/12 dev node0
in_ns sysctl -qw net.ipv4.ip_forward=1
mount --make-rshared /   # hostPath volumes with mount propagation (no systemd does it here)
for p in loopback portmap; do
    [ -e /opt/cni/bin/$p ] || cp /usr/lib/cni/$p /opt/cni/bin/
done

# Certificates: one CA; the apiserver's serving certificate; one client certificate in
# system:masters for every component (a test node, not a production layout).
cd "$PKI"
if [ ! -e admin.crt ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
        -subj /CN=vswitch-k8s-ca 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    sign() {  # name, subject, extensions
        openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
        printf '%s\n' "$3" >"$1.ext"
        openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    sign apiserver /CN=kube-apiserver \
        "subjectAltName=IP:$IP,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default"
    sign admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
fi
KUBECONFIG_FILE=$STATE/kubeconfig
"$KUBE_BIN/kubectl" config --kubeconfig="$KUBECONFIG_FILE" set-cluster node \
    --server="https://$IP:6443" --certificate-authority="$PKI/ca.crt" --embed-certs >/dev/null
"$KUBE_BIN/kubectl" config --kubeconfig="$KUBECONFIG_FILE" set-credentials admin \
    --client-certificate="$PKI/admin.crt" --client-key="$PKI/admin.key" --embed-certs >/dev/null
"$KUBE_BIN/kubectl" config --kubeconfig="$KUBECONFIG_FILE" set-context node \
    --cluster=node --user=admin >/dev/null
"$KUBE_BIN/kubectl" config --kubeconfig="$KUBECONFIG_FILE" use-context node >/dev/null
KC="--kubeconfig=$KUBECONFIG_FILE"

# The control plane.
start etcd etcd --data-dir="$STATE/etcd" --listen-client-urls=http://127.0.0.1:22379 \
    --advertise-client-urls=http://127.0.0.1:22379 --listen-peer-urls=http://127.0.0.1:22380
start kube-apiserver "$KUBE_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:22379 \
    --advertise-address="$IP" --secure-port=6443 --service-cluster-ip-range=10.96.0.0/12 \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --authorization-mode=Node,RBAC \
    --kubelet-client-certificate="$PKI/admin.crt" --kubelet-client-key="$PKI/admin.key" \
    --kubelet-preferred-address-types=InternalIP --allow-privileged=true
start kube-controller-manager "$KUBE_BIN/kube-controller-manager" "$KC" --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=false
start kube-scheduler "$KUBE_BIN/kube-scheduler" "$KC" --leader-elect=false

# containerd 1.6: its own root, state and socket; oom_score_adj restricted (no privilege to
# lower it here), cgroupfs (no systemd), the CNI config the DaemonSet installs.
cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUNDIR/containerd"
[grpc]
  address = "$RUNDIR/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
EOF
start containerd containerd --config "$STATE/containerd.toml"

cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, x509: {clientCAFile: "$PKI/ca.crt"}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://$RUNDIR/containerd.sock
EOF
cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: 10.1.0.0/16
hostnameOverride: $NODE
clientConnection: {kubeconfig: "$KUBECONFIG_FILE"}
# nf_conntrack_max is not writable from a network namespace: leave it as the machine has it.
conntrack: {maxPerCore: 0}
EOF
for _ in $(seq 60); do
    in_ns "$KUBE_BIN/kubectl" "$KC" get --raw=/readyz >/dev/null 2>&1 && break
    sleep 1
done
start kubelet "$KUBE_BIN/kubelet" "$KC" --config="$STATE/kubelet.yaml" \
    --hostname-override="$NODE" --node-ip="$IP"
start kube-proxy "$KUBE_BIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
for _ in $(seq 60); do
    in_ns "$KUBE_BIN/kubectl" "$KC" get node "$NODE" >/dev/null 2>&1 && break
    sleep 1
done
# k8s/base/etcd.yaml runs etcd on a control-plane node; the kubelet may not set this label itself.
in_ns "$KUBE_BIN/kubectl" "$KC" label node "$NODE" node-role.kubernetes.io/control-plane= \
    --overwrite >/dev/null
cat <<EOF
export VSWITCH_TEST_KUBECONFIG=$KUBECONFIG_FILE
export VSWITCH_TEST_K8S_NODE_NETNS=/var/run/netns/$NS
export VSWITCH_TEST_KUBECTL=$KUBE_BIN/kubectl
export CONTAINERD_SOCKET=$RUNDIR/containerd.sock
EOF
