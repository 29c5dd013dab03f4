"""The cluster side: how nodes learn about each other, beside the request path and never in it.

    node.py        NodeInfo: what one node publishes (name, ID, node IP, VXLAN address, subnets)
    registry.py    the node registry in etcd: publish, list, watch, liveness, removal
    controller.py  the mesh controller: registry events -> desired remote nodes -> MeshDataplane
    remove.py      `vswitch-agent --config F node remove NAME`: the operator's node removal

The dataplane half of the mesh lives with the drivers (agent/dataplane/kernel_mesh.py; with VPP
agent/dataplane/vpp/node_mesh.py).
"""
