"""vswitchctl: the operator CLI over the agents' REST endpoints and etcd."""
