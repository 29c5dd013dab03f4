"""The infra wing: what every wing may use and none depends on for its meaning.

    logs.py        text or JSON log lines with the request's fields
    metrics.py     the agent's Prometheus registry and its metrics
    failpoints.py  named places where a test can make the agent fail
    backoff.py     one retry with backoff for start-up waits (etcd, VPP)
    loops.py       the supervised background loop every thread of the agent's runs in
    listwatch.py   a cached list + watch with relist and diff, for any source (etcd, Kubernetes)
    watchstream.py what such a source gives: listings, events, watch streams and their ends
    health.py      probes: a yes/no condition checked in the background, read without waiting
"""
