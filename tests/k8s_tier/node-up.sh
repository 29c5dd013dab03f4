#!/bin/bash
# Starts a Kubernetes cluster for the k8s tier, from binaries you supply: the control plane and its
# first node, inside a network namespace and a mount namespace of their own, on a fabric bridge
# further nodes join (node-join.sh; node-lib.sh says what a node is). The machine's routes,
# iptables, nftables and its /etc/cni, /opt/cni, /run/vswitch-cni, ... stay untouched.
#
# Usage: KUBE_BIN=DIR tests/k8s_tier/node-up.sh        stop: tests/k8s_tier/node-down.sh
#   KUBE_BIN  holds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#             and kubectl, all of one release (v1.28 was used), e.g. a Kubernetes source tree's
#             _output/bin after `make WHAT=cmd/<name>` for each (docs/k8s-tier.md); checked first
# Env (defaults): NODE_NETNS (vswk8s), NODE_IP (192.168.16.1), STATE (/var/lib/vswitch-k8s),
#   RUNDIR (/run/vswk8s), FABRIC_NETNS (vswk8s-fab). Needs etcd, containerd 1.6, runc, openssl
#   on the machine, and Debian's /usr/lib/cni/{loopback,portmap} (copied into the node's
#   /opt/cni/bin).
# Images: no registry is needed if `pause` (registry.k8s.io/pause:3.9) and the tier's images are
#   imported with `ctr -a $RUNDIR/containerd.sock -n k8s.io images import`; IMAGES (tar files,
#   space-separated) are imported so once containerd runs.
# Prints the environment for the tier (VSWITCH_TEST_KUBECONFIG and friends).
set -euo pipefail
: "${KUBE_BIN:?KUBE_BIN must name the directory of the Kubernetes binaries}"
NS=${NODE_NETNS:-vswk8s} IP=${NODE_IP:-192.168.16.1}
STATE=${STATE:-/var/lib/vswitch-k8s} RUNDIR=${RUNDIR:-/run/vswk8s}
NODE=$NS-node PKI=$STATE/pki KUBECONFIG_FILE=$STATE/kubeconfig
# shellcheck source=tests/k8s_tier/node-lib.sh
. "$(dirname "$0")/node-lib.sh"
kube_bin_check kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
mkdir -p "$PKI" "$LOGS" "$RUNDIR"

fabric_up
node_net_up
node_mounts_up

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

for _ in $(seq 60); do
    in_ns "$KUBE_BIN/kubectl" "$KC" get --raw=/readyz >/dev/null 2>&1 && break
    sleep 1
done
node_services_up
[ -z "${IMAGES:-}" ] || import_images $IMAGES
# k8s/base/etcd.yaml runs etcd on a control-plane node; the kubelet may not set this label itself.
in_ns "$KUBE_BIN/kubectl" "$KC" label node "$NODE" node-role.kubernetes.io/control-plane= \
    --overwrite >/dev/null
cat <<EOF
export VSWITCH_TEST_KUBECONFIG=$KUBECONFIG_FILE
export VSWITCH_TEST_K8S_NODE_NETNS=/var/run/netns/$NS
export VSWITCH_TEST_KUBECTL=$KUBE_BIN/kubectl
export CONTAINERD_SOCKET=$RUNDIR/containerd.sock
EOF
