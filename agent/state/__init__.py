"""The state wing: what the node remembers, in etcd and on its own disk.

    store.py          etcd: node IDs, pod records and IP allocations (atomic transactions), of:
      etcd_client.py      the connection; etcd errors become agent errors here only
      etcd_keys.py        the key layout and value format
      id_bindings.py      node ID claims, bindings and releases
      pod_allocations.py  pod records with their allocation keys
    etcd_tls.py       TLS to etcd: credentials from the config's files, failures in words
    node_ids.py       this node's cluster-unique ID, claimed once and kept
    id_guard.py       the ID's binding in etcd, kept true while the agent runs
    registry.py       the node registry: publish, list, watch, liveness
    node_removal.py   an operator's removal of a gone node
    local_records.py  the node's own copy of its pod records, mirrored on its disk
    journal.py        DELs owed to etcd while it was unreachable
    statedir.py       whole-file writes in the StateDir, and a misbehaving disk

Imports model and infra only.
"""
