"""NetworkPolicy in the kernel: the compiled rules (`policy/`) as nftables chains, verdict maps,
shared peer sets and counters in the agent's table `inet vswitch-cni`, beside NAT's objects
(`hostnat/`).

    render.py     pure: compiled rules -> each pod's nftables objects (chains, counters, map
                  elements, the shared peer sets; their verdicts are described there)
    transactions.py  pure: the transactions that make the table hold them (full, diff, per pod)
    verdict.py    pure: would the rules let this connection start now? what must be swept?
    conntrack.py  deletes the tracked connections a change denies (pyroute2, ctnetlink)
    views.py      pure: counts per policy and per pod, what is installed for a pod
    table.py      NftPolicy: apply / apply_pod / remove_pod / remove, counters, rules_for

The API (the app constructs one NftPolicy and calls it; docs/policy.md, "Kernel renderer"):

    NftPolicy(table="vswitch-cni", *, sweep_conntrack=True)
      .apply({PodKey: PodRules(policy: PodPolicy, addresses)}) -> Applied   all of this node
      .apply_pod(key, PodRules) -> Applied       one pod, e.g. during its CNI ADD
      .remove_pod(key) -> Applied                the pod is gone
      .remove()                                  the node leaves
      .counters() -> Counters(allowed: {policy: Count}, dropped: {(PodKey, dir): Count})
      .rules_for(key) -> PodView | None           what is installed for a pod
"""

from agent.linux.nft import NftError
from agent.linux.nftpolicy.render import PodRules
from agent.linux.nftpolicy.table import TABLE, Applied, NftPolicy
from agent.linux.nftpolicy.views import Count, Counters, DirectionView, PodView

__all__ = ["TABLE", "Applied", "Count", "Counters", "DirectionView", "NftError", "NftPolicy",
           "PodRules", "PodView"]
