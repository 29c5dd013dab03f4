#!/bin/bash
# Starts one more node of the cluster node-up.sh started, from the same binaries: its own network
# namespace on the fabric, its own mount namespace, containerd, kubelet and kube-proxy (node-lib.sh),
# joined to the same apiserver. Run node-up.sh first.
#
# Usage: KUBE_BIN=DIR tests/k8s_tier/node-join.sh      stop: NODE_NETNS=... tests/k8s_tier/node-down.sh
# Env (defaults): NODE_NETNS (vswk8s2), NODE_IP (192.168.16.2), STATE (/var/lib/$NODE_NETNS),
#   RUNDIR (/run/$NODE_NETNS), CLUSTER_STATE (/var/lib/vswitch-k8s: node-up.sh's STATE, whose
#   kubeconfig and CA the node uses), FABRIC_NETNS (vswk8s-fab), IMAGES (tar files to import).
# Prints the environment for the tier's second node.
set -euo pipefail
: "${KUBE_BIN:?KUBE_BIN must name the directory of the Kubernetes binaries}"
NS=${NODE_NETNS:-vswk8s2} IP=${NODE_IP:-192.168.16.2}
STATE=${STATE:-/var/lib/$NS} RUNDIR=${RUNDIR:-/run/$NS}
CLUSTER_STATE=${CLUSTER_STATE:-/var/lib/vswitch-k8s}
PKI=$CLUSTER_STATE/pki KUBECONFIG_FILE=$CLUSTER_STATE/kubeconfig
[ -e "$KUBECONFIG_FILE" ] || { echo "no cluster: $KUBECONFIG_FILE is missing (node-up.sh)" >&2; exit 1; }
# shellcheck source=tests/k8s_tier/node-lib.sh
. "$(dirname "$0")/node-lib.sh"
kube_bin_check kubelet kube-proxy kubectl
[ -e "/var/run/netns/$FABRIC" ] || { echo "no fabric namespace $FABRIC (node-up.sh)" >&2; exit 1; }
mkdir -p "$LOGS" "$RUNDIR"

node_net_up
node_mounts_up
node_services_up
[ -z "${IMAGES:-}" ] || import_images $IMAGES
cat <<EOF
export VSWITCH_TEST_K8S_NODE2_NETNS=/var/run/netns/$NS
export CONTAINERD_SOCKET2=$RUNDIR/containerd.sock
EOF
