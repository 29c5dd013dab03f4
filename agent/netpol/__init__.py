"""NetworkPolicy on the node: the controller between the Kubernetes cache, the pure compiler
(`policy/`) and the renderers (nftables in agent/linux, VPP ACLs in agent/dataplane/vpp).

    types       what a renderer gets (one `Enforced` per local attachment) and its protocol
    controller  PolicyController: full applies on cache changes and on a timer, the ADD hook
                (a pod's rules before the CNI answer), the DEL hook, what `vswitchctl policy`
                shows

It sits on the lifecycle's floor and imports neither the lifecycle nor the renderers: the
composition root (agent/app) builds it with the cache and the renderers it chose, and gives
the lifecycle its `admit` / `release` hooks.
"""
