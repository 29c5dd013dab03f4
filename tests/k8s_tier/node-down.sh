#!/bin/bash
# Stops the node started by node-up.sh and removes what it left: its containers and their network
# namespaces, mounts, state (with k8s/base/etcd.yaml's /var/lib/vswitch-etcd), the node namespace,
# and what the vswitch DaemonSet installed on the host (/opt/cni/bin/vswitch-cni and
# /etc/cni/net.d/10-vswitch.conflist).
# Env: the same NODE_NETNS, STATE, RUNDIR as node-up.sh.
set -uo pipefail
NS=${NODE_NETNS:-vswk8s} STATE=${STATE:-/var/lib/vswitch-k8s} RUNDIR=${RUNDIR:-/run/vswk8s}
SOCK=$RUNDIR/containerd.sock
stop() {  # name: TERM, then KILL, the process node-up.sh started
    local pidfile=$RUNDIR/$1.pid
    [ -f "$pidfile" ] || return 0
    local pid; pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$pidfile"
}
stop kube-proxy
stop kubelet
if [ -S "$SOCK" ]; then
    # Pod sandboxes' namespaces are bind mounts the CRI would remove on RemovePodSandbox.
    netns=$(for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q); do
        ctr -a "$SOCK" -n k8s.io containers info "$c"
    done | grep -o '/var/run/netns/cni-[0-9a-f-]*' | sort -u)
    for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q); do
        ctr -a "$SOCK" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1
    done
    sleep 1
    for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q); do
        ctr -a "$SOCK" -n k8s.io tasks rm -f "$c" >/dev/null 2>&1
        ctr -a "$SOCK" -n k8s.io containers rm "$c" >/dev/null 2>&1
    done
    for n in $netns; do umount "$n" 2>/dev/null; rm -f "$n"; done
fi
for name in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop "$name"
done
# Volumes of pods (secrets, projected tokens) and containerd's snapshots, deepest first.
for root in /var/lib/kubelet "$STATE" "$RUNDIR"; do
    awk -v r="$root" '$2 ~ "^"r"/" {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
done
ip netns del "$NS" 2>/dev/null
rm -rf "$STATE" "$RUNDIR" /var/lib/kubelet /var/lib/vswitch-etcd
rm -f /opt/cni/bin/vswitch-cni /etc/cni/net.d/10-vswitch.conflist
echo "node $NS stopped"
