"""The test bed: real pieces on one machine, shared by the demos, the benchmarks and the tests.

    tools     where the project's programs are (beside the running interpreter, never PATH)
    etcd      real etcd members on free loopback ports, temp data dirs, fault injection
    netns     network namespaces that are always removed again; commands and pings inside them
    agent     a real `vswitch-agent` process with its config, and the real plugin exec'd at it
    cluster   nodes as namespaces on a fabric bridge, one etcd, an agent per node (the demo's)
    pods      pods wired by a dataplane driver in-process, without the agent
    traffic   real TCP and UDP between namespaces (also a stdlib-only script run inside them)
    echo      TCP and UDP servers in many pod namespaces from one thread, and probes from a pod
    service   a Service stand-in: kube-proxy's DNAT on the node, in a table of its own
    vpp       a real VPP shared with others: an isolated agent config, base removal, a probe
    vpplog    VPP's log lines since a point, sorted by cause (a client's order, VPP's own)
    libcni    the libcni 1.3.0 driver (containerd's and CRI-O's library) and the reference plugins

Only the tests import `tests`; everything here is shipped with the project.
"""
