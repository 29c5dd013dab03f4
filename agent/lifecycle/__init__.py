"""The lifecycle wing: the CNI verbs against state, dataplane and the pod's namespace.

    pods.py       PodManager: ADD, DEL, CHECK and GC, serialized per attachment (KeyedLocks:
                  never one node-wide lock)
    parts.py      what the steps and checks work with (store, dataplane, the node's address
                  allocator from ipam, pod side, ...), each named by a protocol
    add_steps.py  one ADD's steps, each with its undo
    del_steps.py  one DEL's steps, journaled while etcd does not answer
    checks.py     CHECK, inspection, repair, and the records etcd lost written back
    reconcile.py  before serving: make dataplane, addresses and etcd agree with the records

Imports model, infra, linux, state and dataplane; never the cluster wing or the API.
"""
