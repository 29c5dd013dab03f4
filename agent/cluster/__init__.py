"""The cluster wing: the mesh controller, beside the request path and never in it.

    controller.py  registry events -> desired remote nodes -> the dataplane's mesh calls

What a node publishes (NodeInfo) is in agent/model/node.py, the registry in
agent/state/registry.py, the dataplane half of the mesh with the drivers
(agent/dataplane/kernel_mesh.py; with VPP agent/dataplane/vpp/node_mesh.py), and the wiring of
all three in agent/app/cluster_side.py. Never imports the dataplane: the app hands the
controller its mesh.
"""
