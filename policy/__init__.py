"""Pure NetworkPolicy compilation: Pods, Namespaces and NetworkPolicies in, per-pod ingress and
egress rule sets out, for the renderers (kernel: nftables; vpp: the ACL plugin) to install.

No I/O here, and nothing of the agent: the reflector cache feeds it, the renderers read it.
The public API:

    pod_from_k8s(obj), namespace_from_k8s(obj), policy_from_k8s(obj)   the API's JSON -> values
    Pod, ContainerPort, Namespace, NetworkPolicy, PolicyRule, Peer,    the input values
        IPBlock, PolicyPort, LabelSelector, Requirement
    compile_policies(pods, namespaces, policies, *, sctp, node_addresses=None, node=None)
        -> Compiled                                                    the compiler
    Compiled(pods: {PodKey: PodPolicy}, warnings)                      its result
    PodPolicy(pod, node_addresses, ingress, egress: DirectionRules(isolated, rules))
    Rule(peers: CIDRs, ports: (PortRange, ...) | None = all traffic, policies)
    DirectionRules.shared: (SetRule(sets: (PeerSet(name, members), ...), static, ports,
        policies), ...)                                                the same, selectors as sets
    policy.cluster.Cluster(pods, namespaces).update(changed, removed)  an index kept between
    policy.compiler.compile_cluster(cluster, policies, ...)            compiles, and its compile
    PolicyError (ValueError): malformed input, naming the object and the field

docs/policy.md gives the semantics and the choices the spec leaves open.
"""

from policy.compiler import compile_policies
from policy.model import (
    ContainerPort,
    IPBlock,
    LabelSelector,
    Namespace,
    NetworkPolicy,
    Peer,
    Pod,
    PodKey,
    PolicyError,
    PolicyPort,
    PolicyRule,
    Requirement,
)
from policy.parse import namespace_from_k8s, pod_from_k8s, policy_from_k8s
from policy.rules import Compiled, DirectionRules, PodPolicy, PortRange, Rule

__all__ = [
    "Compiled",
    "ContainerPort",
    "DirectionRules",
    "IPBlock",
    "LabelSelector",
    "Namespace",
    "NetworkPolicy",
    "Peer",
    "Pod",
    "PodKey",
    "PodPolicy",
    "PolicyError",
    "PolicyPort",
    "PolicyRule",
    "PortRange",
    "Requirement",
    "Rule",
    "compile_policies",
    "namespace_from_k8s",
    "pod_from_k8s",
    "policy_from_k8s",
]
