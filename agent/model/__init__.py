"""The model wing: what everything else talks about, with no I/O.

    pod.py       a pod attachment: its identity (PodKey), the CNI request that asks for it,
                 decoded and validated (CniRequest), its network (PodNetwork), its record,
                 IP types
    node.py      NodeInfo: one node's registry entry, and how this node computes its own
    errors.py    the error hierarchy, each error with its CNI code

Imports nothing of the agent; only ipam, which is pure too.
"""
