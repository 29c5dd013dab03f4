"""The infra wing: what every wing may use and none depends on for its meaning.

    logs.py        text or JSON log lines with the request's fields
    metrics.py     the agent's Prometheus registry and its metrics
    failpoints.py  named places where a test can make the agent fail
    backoff.py     one retry with backoff for start-up waits (etcd, VPP)
"""
