#!/bin/bash
# Binds a directory of this machine at a path inside one node's mount namespace, e.g. a VPP's
# socket directory at the path VSWITCH_TEST_VPP_SOCKET names for that node. A bind mount made on
# the machine after node-up.sh / node-join.sh never reaches the node: its mount namespace is a
# peer group of its own (node-lib.sh), so its kubelet and the agent would see the empty directory
# beneath. The bind goes with the node (node-down.sh).
#
# Usage: tests/k8s_tier/node-bind.sh NODE_NETNS SOURCE TARGET
#   NODE_NETNS  the node's network namespace (vswk8s, vswk8s2): the node is $NODE_NETNS-node
#   SOURCE      as the node sees it: a directory of the machine, not a mount made there after the
#               node started (that one does not reach the node either)
#   TARGET      made when missing; bind before the tier deploys the agent (its pod mounts what
#               is there when it starts)
# Env: RUNDIR (/run/NODE_NETNS), the node's run directory, as node-up.sh / node-join.sh had it.
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: $0 NODE_NETNS SOURCE TARGET" >&2
    exit 2
fi
NS=$1 SOURCE=$2 TARGET=$3
MNT=${RUNDIR:-/run/$NS}/ns/mnt
[ -e "$MNT" ] || { echo "no node $NS here: $MNT is missing (node-up.sh, node-join.sh)" >&2; exit 1; }
in_node() { nsenter --mount="$MNT" "$@"; }
in_node test -d "$SOURCE" || {
    echo "$SOURCE is no directory in node $NS's mount namespace" >&2; exit 1; }
in_node mkdir -p "$TARGET"
in_node mount --bind "$SOURCE" "$TARGET"
echo "bound $SOURCE at $TARGET for node $NS-node"
