"""ClusterIP translation on the node (`ServiceTranslation: vpp`): the controller between the
Kubernetes cache's Services and EndpointSlices, the pure model (`services`) and the renderer
(VPP's cnat plugin, agent/dataplane/vpp/cnat.py), beside the request path.

    controller   ClusterIPController: full applies on changes, on a timer, after VPP reconnects
"""
