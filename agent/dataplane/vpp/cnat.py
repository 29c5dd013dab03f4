"""Service translations in VPP's cnat plugin: the desired translations (computed by the pure
`services` package) diffed against what VPP holds.

    services = VppServices(api, ensure=driver.ensure)
    services.apply({key: Translation, ...}, pod_interfaces=[sw_if_index, ...])
    services.installed()                    # {TranslationKey: backends}, no VPP call

A translation is one `cnat_translation_update` (VIP = the Service address:port, protocol, one
path per ready endpoint: destination rewritten, source kept, so the backend sees the client
pod's address). VPP answers its id; the same VIP, port and protocol again replaces the paths in
place (same id). `cnat_translation_del` takes one away.

Two things VPP fixes when it creates a translation and an update does not change:
- `is_real_ip`: a ClusterIP is VPP's alone (cnat's FIB entry for it is exclusive); a node
  address, externalIP or LoadBalancer IP may be a real host's, so cnat interposes on the route
  VPP has and traffic to its other ports goes where it went;
- the load balancing: ClientIP affinity is Maglev over a flow hash of the client's address
  alone (a client's new connections go to one backend; Maglev moves few clients when the
  backends change). Its `lb_type` is what VPP's details give back, so after an agent restart
  the affinity is known again; `is_real_ip` is not given back and is taken as it should be.
A translation whose kind of address or affinity changed is deleted and made again.

cnat translations carry no tag: the agent owns every translation of its VPP (docs/vpp.md says
so), so after an agent restart the first apply reads them back (`cnat_translation_dump`), keeps
the ones still wanted and deletes the rest; after a VPP restart (a new connection generation)
VPP has none and all are made again.

`pod_interfaces`: the node's pod interfaces; cnat is enabled on any this renderer has not seen
on this connection (the driver enables it on each pod it wires; this covers pods made before
the agent translated Services). Connections already made keep their backend (cnat's session)
until they end or time out, also when that backend is gone from the Service.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.dataplane.vpp import cnat_node
from agent.dataplane.vpp.api import VppApi, VppCallFailed
from services import CLUSTER_IP, Backend, Translation, TranslationKey

log = logging.getLogger(__name__)

ANY = 0xFFFFFFFF
PROTOCOLS = {"TCP": 6, "UDP": 17}  # vl_api_ip_proto_t
PROTOCOL_NAMES = {v: k for k, v in PROTOCOLS.items()}
LB_DEFAULT, LB_MAGLEV = 0, 1  # vl_api_cnat_lb_type_t
HASH_SRC_IP = 0x01  # vl_api_ip_flow_hash_config_v2_t: the source address only


@dataclass(frozen=True)
class Held:
    """What VPP holds for a key: its id, the backends, whether the VIP is a real host's
    address (None: read back from VPP, which does not say) and the affinity."""

    ident: int
    backends: tuple[Backend, ...]
    real: bool | None
    affinity: bool

    def same_kind(self, translation: Translation) -> bool:
        return translation.affinity == self.affinity and \
            self.real in (None, translation.kind != CLUSTER_IP)


@dataclass
class ServicesReport:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    enabled: int = 0  # pod interfaces cnat was enabled on
    failed: dict[TranslationKey, str] = field(default_factory=dict)


def _endpoint(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
              ) -> dict[str, Any]:
    return {"addr": str(address), "sw_if_index": ANY, "if_af": 0 if address.version == 4 else 1,
            "port": port}


def encode(translation: Translation) -> dict[str, Any]:
    """The `translation` field of cnat_translation_update."""
    key = translation.key
    unset = ipaddress.ip_address("0.0.0.0" if key.vip.version == 4 else "::")
    paths = [{"dst_ep": _endpoint(b.address, b.port), "src_ep": _endpoint(unset, 0), "flags": 0}
             for b in translation.backends]
    return {"vip": _endpoint(key.vip, key.port), "id": 0, "ip_proto": PROTOCOLS[key.protocol],
            "is_real_ip": int(translation.kind != CLUSTER_IP), "flags": 0,
            "lb_type": LB_MAGLEV if translation.affinity else LB_DEFAULT, "n_paths": len(paths),
            "flow_hash_config": HASH_SRC_IP if translation.affinity else 0, "paths": paths}


def decode(details: Any) -> tuple[TranslationKey, Held] | None:
    """The key and what VPP holds of one cnat_translation_details; None for what the agent
    never makes (an interface VIP, another protocol)."""
    t = details.translation
    protocol = PROTOCOL_NAMES.get(int(t.ip_proto))
    if protocol is None or int(t.vip.sw_if_index) != ANY:
        return None
    key = TranslationKey(ipaddress.ip_address(str(t.vip.addr)), int(t.vip.port), protocol)
    backends = tuple(sorted(Backend(ipaddress.ip_address(str(p.dst_ep.addr)), int(p.dst_ep.port))
                            for p in list(t.paths)[: int(t.n_paths)]))
    return key, Held(int(t.id), backends, None, int(t.lb_type) == LB_MAGLEV)


class VppServices:
    """The VPP renderer of ClusterIP translations (see the module docstring)."""

    def __init__(self, api: VppApi, ensure: Callable[[], None] = lambda: None) -> None:
        """`ensure`: the driver's base configuration (cnat's node setup is part of it)."""
        self.api = api
        self._ensure = ensure
        self._lock = threading.Lock()
        self._generation = -1
        self._installed: dict[TranslationKey, Held] = {}
        self._enabled: set[int] = set()
        self._unread: set[int] = set()  # ids VPP holds that no key explains (read back)

    def installed(self) -> dict[TranslationKey, tuple[Backend, ...]]:
        with self._lock:
            return {k: held.backends for k, held in self._installed.items()}

    def apply(self, desired: Mapping[TranslationKey, Translation],
              pod_interfaces: Iterable[int] = ()) -> ServicesReport:
        """Makes VPP hold exactly `desired`; a translation VPP refuses is reported and the
        others go on. Raises TryAgainLater when VPP is away."""
        report = ServicesReport()
        with self._lock:
            self._ensure()
            self.api.call("control_ping")  # a VPP restarted since: noticed here, not later
            self._read_back()
            for sw in sorted(set(pod_interfaces) - self._enabled):
                try:
                    cnat_node.enable(self.api, sw)
                except VppCallFailed as exc:  # a pod being deleted meanwhile: next time
                    log.info("cnat on interface %d: %s", sw, exc)
                    continue
                self._enabled.add(sw)
                report.enabled += 1
            for key in sorted(set(self._installed) - set(desired)):
                self._delete(self._installed.pop(key).ident)
                report.deleted += 1
            for key in sorted(set(self._installed) & set(desired)):
                if not self._installed[key].same_kind(desired[key]):  # only a new one changes it
                    self._delete(self._installed.pop(key).ident)
            for ident in sorted(self._unread):
                self._delete(ident)
                report.deleted += 1
            self._unread.clear()
            for key, translation in sorted(desired.items()):
                have = self._installed.get(key)
                if have is not None and have.backends == translation.backends:
                    report.unchanged += 1
                    continue
                try:
                    reply = self.api.call("cnat_translation_update",
                                          context=f"Service {translation.service} {key}",
                                          translation=encode(translation))
                except VppCallFailed as exc:
                    report.failed[key] = str(exc)
                    continue
                self._installed[key] = Held(int(reply.id), translation.backends,
                                            translation.kind != CLUSTER_IP, translation.affinity)
                if have is None:
                    report.created += 1
                else:
                    report.updated += 1
        if report.failed:
            log.error("Service translations VPP refused: %s", report.failed)
        return report

    def _read_back(self) -> None:
        """On a new VPP connection: what VPP holds is what is installed."""
        if self._generation == self.api.generation:
            return
        self._installed.clear()
        self._enabled.clear()
        self._unread.clear()
        for details in self.api.dump("cnat_translation_dump"):
            found = decode(details)
            if found is None:
                continue
            key, held = found
            if key in self._installed:  # cannot be (VPP keys them so): delete the extra one
                self._unread.add(held.ident)
            else:
                self._installed[key] = held
        self._generation = self.api.generation
        if self._installed:
            log.info("%d Service translations found in VPP", len(self._installed))

    def _delete(self, ident: int) -> None:
        self.api.call_present("cnat_translation_del", id=ident)  # one already gone: done
