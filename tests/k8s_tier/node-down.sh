#!/bin/bash
# Stops nodes started by node-up.sh / node-join.sh and removes what they left: their containers
# and the pods' network namespaces, their processes, mount, UTS and network namespaces and state
# (with what the vswitch DaemonSet installed on them: it lives in the node's own /opt/cni/bin,
# /etc/cni/net.d, /var/lib/vswitch-*), the control plane with the node that runs it, and the
# fabric once no node is left on it.
#
# Usage: tests/k8s_tier/node-down.sh [NODE_NETNS...]
#   no argument: every node on the fabric, the joined ones first (else NODE_NETNS, vswk8s)
# Env: FABRIC_NETNS (vswk8s-fab). Each node's RUNDIR is /run/<its namespace> unless RUNDIR says
# otherwise (one node); its STATE is the one node-up/node-join recorded there.
set -uo pipefail
FABRIC=${FABRIC_NETNS:-vswk8s-fab}

stop() {  # pidfile: TERM, then KILL, the process the node scripts started
    [ -f "$1" ] || return 0
    local pid; pid=$(cat "$1")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$1"
}

node_down() {  # namespace, run dir
    local ns=$1 rundir=$2 state sock mnt netns mnt_id p
    state=$(cat "$rundir/state-dir" 2>/dev/null) || state=""
    sock=$rundir/containerd.sock mnt=$rundir/ns/mnt
    stop "$rundir/kube-proxy.pid"
    stop "$rundir/kubelet.pid"
    # The pods' network namespaces: bind mounts inside the node's mount namespace.
    netns=""
    [ -e "$mnt" ] && netns=$(nsenter --mount="$mnt" awk '$2 ~ "^/run/netns/cni-" {print $2}' \
        /proc/self/mounts)
    if [ -S "$sock" ]; then
        for t in $(ctr -a "$sock" -n k8s.io tasks ls -q); do
            ctr -a "$sock" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1
        done
        sleep 1
        for c in $(ctr -a "$sock" -n k8s.io containers ls -q); do
            ctr -a "$sock" -n k8s.io tasks rm -f "$c" >/dev/null 2>&1
            ctr -a "$sock" -n k8s.io containers rm "$c" >/dev/null 2>&1
        done
    fi
    for name in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do
        stop "$rundir/$name.pid"
    done
    if [ -e "$mnt" ]; then
        # Whatever still runs in the node's mount namespace was started for it (containerd's
        # shims): nothing else enters it.
        mnt_id=$(stat -L -c %i "$mnt")
        for p in /proc/[0-9]*; do
            [ "$(stat -L -c %i "$p/ns/mnt" 2>/dev/null)" = "$mnt_id" ] && kill -KILL "${p#/proc/}"
        done
        umount "$mnt"
    fi
    umount "$rundir/ns/uts" 2>/dev/null
    umount "$rundir/ns" 2>/dev/null
    for n in $netns; do umount "$n" 2>/dev/null; rm -f "$n"; done
    ip netns del "$ns" 2>/dev/null  # its uplink's fabric end goes with it
    [ -n "$state" ] && rm -rf "$state"
    rm -rf "$rundir"
    echo "node $ns stopped"
}

if [ $# -eq 0 ]; then
    if [ -e "/var/run/netns/$FABRIC" ]; then
        # The node holding the control plane last: the others still talk to it while stopping.
        for ns in $(ip -n "$FABRIC" -o link show master br0 | awk -F'[:@ ]+' '{print $2}'); do
            if [ -e "/run/$ns/kube-apiserver.pid" ]; then last=$ns; else set -- "$@" "$ns"; fi
        done
        set -- "$@" ${last:-}
    else
        set -- "${NODE_NETNS:-vswk8s}"
    fi
fi
for ns in "$@"; do
    node_down "$ns" "${RUNDIR:-/run/$ns}"
done
# A deleted node namespace takes its uplink's fabric end with it, but the kernel tears the
# namespace down asynchronously: the bridge may take a moment to empty.
for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -e "/var/run/netns/$FABRIC" ] && [ -n "$(ip -n "$FABRIC" -o link show master br0)" ] || break
    sleep 0.5
done
if [ -e "/var/run/netns/$FABRIC" ] && [ -z "$(ip -n "$FABRIC" -o link show master br0)" ]; then
    ip netns del "$FABRIC"
    echo "fabric $FABRIC removed"
fi
# The mount points a node namespace needed on the machine, when nothing else filled them.
for p in /var/lib/vswitch-cni /var/lib/vswitch-etcd /run/vswitch-cni; do
    rmdir "$p" 2>/dev/null
done
exit 0
