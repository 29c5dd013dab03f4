"""The Kubernetes reflector: Pods, Namespaces, NetworkPolicies and Nodes (and, when the agent
translates ClusterIPs itself, Services and EndpointSlices) from the API server,
listed and watched into local caches (agent/infra/listwatch), read by the rest of the agent.

    objects     the pure part: the kinds, keys, a Node's value, one watch event -> Put/Delete
    api         the connection (lightkube's config and HTTP client), LIST/GET/WATCH, KubeError
    refusals    objects the converters refuse: logged once, counted, left out
    source      one kind as a list+watch Source (a thread reads each watch's lines)
    reflector   KubeState: the caches, start/stop, readers, `pod()` with its one GET

docs/policy.md ("The reflector") says what it watches, how it recovers and the RBAC it needs.
"""
