"""The model wing: what everything else talks about, with no I/O.

    pod.py       pod identity (PodKey), the pod's network (PodNetwork), the pod record, IP types
    node.py      NodeInfo: one node's registry entry, and how this node computes its own
    request.py   one CNI request, decoded and validated (CniRequest)
    errors.py    the error hierarchy, each error with its CNI code

Imports nothing of the agent; only ipam, which is pure too.
"""
