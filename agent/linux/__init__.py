"""The linux wing: everything that talks to the node's and the pods' kernel networking.

    netns.py      network namespaces: a pod's opened and checked once per request (PodNetns),
                  sockets made inside one
    netlink.py    the slow paths: pyroute2 sessions and raw readers per namespace, the host's
                  links, and the translation of netlink errors into ours
    nlcodec.py    the rtnetlink wire format: message layouts, attributes, every constant, once
    nlwrite.py    raw rtnetlink writes, batched: everything an ADD sends (host and pod batches,
                  the veth pair, a host link deleted or looked up), with its errors translated
    nlread.py     raw rtnetlink reads, lean (CHECK and reconcile)
    iproute.py    pyroute2 for the slow paths (start-up, node mesh, VPP host link, undoing a pod
                  side), behind methods named by what they do
    pod_netns.py  inside a pod's namespace: addresses, gateway neighbor, routes, MTU
    ethtool.py    offload features of a device
    nft.py        libnftables through ctypes: one JSON document, one transaction
    hostnat/      NAT in the agent's own nftables table (egress, the VPP Service return path)
    nftpolicy/    NetworkPolicy in the same table: per-pod chains, verdict maps, conntrack

Imports model and infra (and the pure `policy` compiler's types, for nftpolicy/) only: it knows
nothing of pods' lifecycles, etcd or VPP. No other wing imports pyroute2 (a contract in
pyproject.toml): they call the functions here.
"""
