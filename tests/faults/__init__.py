"""The fault-injection suite: the real agent killed at every step boundary and at random points,
etcd stopped and started, with real etcd, real namespaces and the real plugin executable."""
