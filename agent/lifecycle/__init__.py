"""The lifecycle wing: the CNI verbs against state, dataplane and the pod's namespace.

    pods.py       PodManager: ADD, DEL, CHECK and GC, serialized per attachment
    parts.py      what the steps and checks work with (store, dataplane, the node's address
                  allocator from ipam, pod side, ...),
                  and the per-attachment locks (never one node-wide lock)
    add_steps.py  one ADD's steps, each with its undo
    checks.py     CHECK, inspection, repair, and the records etcd lost written back
    reconcile.py  before serving: make dataplane, addresses and etcd agree with the records

Imports model, infra, linux, state and dataplane; never the cluster wing or the API.
"""
