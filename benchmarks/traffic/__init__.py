"""Pod traffic, both dataplanes: what pods send (TCP, UDP, ping) and what it costs.

- `traffic` (one_node.py): pod to pod on one node, a bare veth pair beside the kernel dataplane and
  VPP's AF_PACKET variants;
- `mesh-traffic` (mesh.py, mesh_report.py): two nodes with the node mesh on, same node, across
  nodes and to a ClusterIP;
- `vpp-core`: VPP on a CPU of its own, Gbit/s per busy CPU beside the kernel;
- `udp-loss`, `service-path`, `vpp-livelock`: where VPP loses datagrams, cnat against the
  kube-proxy detour, VPP under many AF_PACKET interfaces.

    python -m benchmarks run traffic [--quick]
"""
