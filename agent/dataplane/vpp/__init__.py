"""The VPP dataplane driver: pods wired into FD.io VPP through vpp-papi (see docs/vpp.md).

    config.py         VppConfig (validated; built from the agent config by agent/app/wiring)
    api.py            the one vpp-papi call helper: retvals and connection loss -> CniErrors
    interfaces.py, afpacket.py, tap.py, ip.py, neighbors.py   VPP features, one module each
    names.py          deterministic names, MACs and owner tags
    modes.py          the wiring-mode interface; veth_afpacket.py and tapv2.py implement it
    hostlink.py       the Linux side of the VPP-host interconnect
    base.py           the idempotent base configuration (VRFs, gateway, drop routes, host link)
    driver.py         VppDataplane
    mesh.py           the node mesh inside VPP (BVI, bridge domain, VXLAN tunnels)
    node_mesh.py      the node mesh with Dataplane: vpp: mesh.py plus the node's Linux routes
    stats.py          VPP's stats segment (ACL counters, the main heap)
    heap.py           VPP's main heap watched: a warning before it fills, the last reading
"""

from agent.dataplane.vpp.config import VppConfig
from agent.dataplane.vpp.driver import VppDataplane

__all__ = ["VppConfig", "VppDataplane"]
