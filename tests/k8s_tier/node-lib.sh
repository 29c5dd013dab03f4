# Sourced by node-up.sh and node-join.sh: one Kubernetes node on this machine, from binaries you
# supply. A node is
# - a network namespace ($NS) whose uplink `node0` (a veth, the node IP) sits on a bridge in the
#   fabric namespace ($FABRIC): every node of the machine reaches every other over it, as machines
#   on one network do; the machine's own routes and firewall stay untouched;
# - a mount namespace ($RUNDIR/ns/mnt) in which the paths a node keeps to itself are its own
#   (NODE_PATHS, bound from $STATE/root and $RUNDIR/root): the DaemonSet's hostPaths (CNI socket,
#   agent state, CNI config and binaries), the kubelet's root and the pod logs, so that two
#   nodes' kubelets and agents on one machine never see each other's files;
# - a UTS namespace ($RUNDIR/ns/uts) whose hostname is the node's name ($NS-node), as a machine's
#   is: host-network pods share it (their hostname is the node name, which upstream e2e checks);
# - its own containerd 1.6, kubelet and kube-proxy, started inside both namespaces.
# The caller sets NS, IP, STATE, RUNDIR, KUBE_BIN and KUBECONFIG_FILE before `node_up`.

FABRIC=${FABRIC_NETNS:-vswk8s-fab}
FABRIC_MAC=02:00:c0:a8:10:fe  # fixed: a bridge takes its ports' lowest MAC otherwise
# /run/netns stays shared with the machine: node namespaces are bind mounts there.
NODE_PATHS="/var/lib/kubelet /var/lib/vswitch-cni /var/lib/vswitch-etcd /var/lib/cni
/var/log/pods /var/log/containers /etc/cni/net.d /opt/cni/bin /run/vswitch-cni"
MNT=$RUNDIR/ns/mnt UTS=$RUNDIR/ns/uts
LOGS=$STATE/logs

in_ns() { nsenter --net="/var/run/netns/$NS" "$@"; }

kube_bin_check() {  # binaries: said before anything is set up when KUBE_BIN lacks one, or
    # when its kubectl is of another release than its kubelet (Debian 12's own kubectl, 1.20, is
    # too old for the cluster)
    local b missing="" want have
    for b in "$@"; do [ -x "$KUBE_BIN/$b" ] || missing="$missing $b"; done
    if [ -n "$missing" ]; then
        echo "KUBE_BIN ($KUBE_BIN) lacks:$missing. Build each in the Kubernetes source tree of" \
            "the cluster's release (v1.28 here), the same tree for all: \`make WHAT=cmd/<name>\`" \
            "puts it in _output/bin (docs/k8s-tier.md, \"Running it\")" >&2
        return 1
    fi
    want=$("$KUBE_BIN/kubelet" --version 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*' | head -1) || true
    have=$("$KUBE_BIN/kubectl" version --client -o json 2>/dev/null |
        grep -o '"gitVersion": *"v[0-9]*\.[0-9]*' | grep -o 'v[0-9.]*$') || true
    if [ -z "$want" ] || [ "$want" != "$have" ]; then
        echo "$KUBE_BIN/kubectl is ${have:-of no release it names}, its kubelet ${want:-of none}:" \
            "build kubectl in the kubelet's Kubernetes tree (\`make WHAT=cmd/kubectl\`)" >&2
        return 1
    fi
}

start() {  # name, command...: runs it in the node's namespaces, logs and pid under STATE/RUNDIR
    local name=$1; shift
    setsid nsenter --mount="$MNT" --uts="$UTS" --net="/var/run/netns/$NS" "$@" \
        >"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$RUNDIR/$name.pid"
}

fabric_up() {  # the fabric namespace and its bridge, once for all nodes
    [ -e "/var/run/netns/$FABRIC" ] && return 0
    ip netns add "$FABRIC"
    ip -n "$FABRIC" link set lo up
    ip -n "$FABRIC" link add br0 address "$FABRIC_MAC" type bridge
    ip -n "$FABRIC" link set br0 up
}

node_net_up() {  # the node's namespace, its uplink on the fabric, a route for Services
    # (locally originated connections need one before kube-proxy's DNAT), forwarding on.
    ip netns add "$NS"
    in_ns ip link set lo up
    ip -n "$FABRIC" link add "$NS" type veth peer name node0 netns "$NS"
    ip -n "$FABRIC" link set "$NS" master br0 up
    in_ns ip addr add "$IP/24" dev node0
    in_ns ip link set node0 up
    in_ns ip route add 10.96.0.0/12 dev node0
    in_ns sysctl -qw net.ipv4.ip_forward=1
}

node_mounts_up() {  # the node's mount namespace, persistent at $MNT (no process needs to hold it)
    mount --make-rshared /  # hostPath volumes with mount propagation (no systemd does it here)
    mkdir -p "$RUNDIR/ns"
    echo "$STATE" >"$RUNDIR/state-dir"  # for node-down.sh
    # The namespace file must sit on a private mount: on a shared one it would propagate into
    # the namespace it names.
    mount --bind "$RUNDIR/ns" "$RUNDIR/ns"
    mount --make-private "$RUNDIR/ns"
    touch "$MNT" "$UTS"
    unshare --mount="$MNT" --propagation private true
    unshare --uts="$UTS" hostname "$NS-node"
    local p src
    for p in $NODE_PATHS; do
        case $p in /run/*) src=$RUNDIR/root$p ;; *) src=$STATE/root$p ;; esac
        mkdir -p "$src" "$p"
        nsenter --mount="$MNT" mount --bind "$src" "$p"
    done
    # Shared again inside, as its own peer group: the kubelet's HostToContainer mounts need it,
    # and nothing mounted inside reaches the machine.
    nsenter --mount="$MNT" mount --make-rshared /
    for p in loopback portmap; do
        [ -e "$STATE/root/opt/cni/bin/$p" ] || cp "/usr/lib/cni/$p" "$STATE/root/opt/cni/bin/"
    done
}

node_services_up() {  # containerd, kubelet, kube-proxy of node $NS-node
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
hostnameOverride: $NS-node
clientConnection: {kubeconfig: "$KUBECONFIG_FILE"}
# nf_conntrack_max is not writable from a network namespace: leave it as the machine has it.
conntrack: {maxPerCore: 0}
EOF
    start kubelet "$KUBE_BIN/kubelet" "--kubeconfig=$KUBECONFIG_FILE" \
        --config="$STATE/kubelet.yaml" --hostname-override="$NS-node" --node-ip="$IP"
    start kube-proxy "$KUBE_BIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
    local _
    for _ in $(seq 60); do
        in_ns "$KUBE_BIN/kubectl" "--kubeconfig=$KUBECONFIG_FILE" get node "$NS-node" \
            >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "node $NS-node did not register; see $LOGS/kubelet.log" >&2
    return 1
}

import_images() {  # tar files: into the node's containerd (k8s.io namespace)
    local _ f
    for _ in $(seq 30); do [ -S "$RUNDIR/containerd.sock" ] && break; sleep 1; done
    for f in "$@"; do
        ctr -a "$RUNDIR/containerd.sock" -n k8s.io images import "$f" >/dev/null
    done
}
