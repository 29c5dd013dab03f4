"""The linux wing: everything that talks to the node's and the pods' kernel networking.

    netlink.py    pyroute2 helpers and the one translation of netlink errors into ours
    nlcodec.py    the rtnetlink wire format: message layouts, attributes, every constant, once
    nlwrite.py    raw rtnetlink writes, batched (an ADD's hot path)
    nlread.py     raw rtnetlink reads, lean (CHECK and reconcile)
    pod_netns.py  inside a pod's namespace: addresses, gateway neighbor, routes, MTU
    ethtool.py    offload features of a device
    hostnat/      the agent's own nftables table (egress NAT, the VPP Service return path)

Imports model and infra only: it knows nothing of pods' lifecycles, etcd or VPP.
"""
