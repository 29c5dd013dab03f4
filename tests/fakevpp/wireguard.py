"""Handlers of the fake VPP for the wireguard plugin (VPP 26.06, plugins/wireguard).

The rules follow wireguard_api.c, wireguard_if.c and wireguard_peer.c: an interface is made from
the private key given (its public key derived from it; the fake asks `wg pubkey`), named
`wg<instance>`; deleting it deletes its peers. A peer needs a wireguard interface (-2 otherwise)
and at least one allowed IP (-7), and its public key must be new to the whole plugin (-116); a
peer index is never reused within a run. Peers are never "established": the fake carries no
traffic.
"""

from __future__ import annotations

import base64
import subprocess
from typing import Any

from tests.fakevpp.state import ANY, E, State, VppError, random_mac

Fields = dict[str, Any]


def public_key(private: bytes) -> bytes:
    done = subprocess.run(["wg", "pubkey"], input=base64.b64encode(private).decode() + "\n",
                          capture_output=True, text=True, check=True)
    return base64.b64decode(done.stdout.strip())


class WireGuardHandlers:
    s: State

    def wireguard_interface_create(self, req: Any) -> Fields:
        itf = req.interface
        private = bytes(itf.private_key)
        if req.generate_key or len(private) != 32 or not any(private):
            raise VppError(E.INVALID_VALUE)  # the fake makes no keys of its own
        used = {int(i.name[2:]) for i in self.s.interfaces.values() if i.dev_type == "wireguard"}
        instance = next(n for n in range(len(used) + 1) if n not in used)
        created = self.s.add_interface(f"wg{instance}", "wireguard", random_mac())
        self.s.wireguard.interfaces[created.sw_if_index] = (
            private, public_key(private), int(itf.port), str(itf.src_ip))
        return {"sw_if_index": created.sw_if_index}

    def wireguard_interface_delete(self, req: Any) -> Fields:
        sw = int(req.sw_if_index)
        if sw not in self.s.wireguard.interfaces:
            raise VppError(E.INVALID_SW_IF_INDEX)
        self.s.delete_interface(sw)
        return {}

    def wireguard_interface_dump(self, req: Any) -> list[Fields]:
        out = []
        for sw, (private, public, port, src) in sorted(self.s.wireguard.interfaces.items()):
            if int(req.sw_if_index) not in (ANY, sw):
                continue
            out.append({"interface": {
                "user_instance": int(self.s.get(sw).name[2:]), "sw_if_index": sw,
                "private_key": private if req.show_private_key else bytes(32),
                "public_key": public, "port": port, "src_ip": src}})
        return out

    def wireguard_peer_add(self, req: Any) -> Fields:
        peer = req.peer
        sw = int(peer.sw_if_index)
        if sw not in self.s.wireguard.interfaces:
            raise VppError(E.INVALID_SW_IF_INDEX)
        if int(peer.n_allowed_ips) == 0:
            raise VppError(E.INVALID_VALUE)
        key = bytes(peer.public_key)
        if any(p["public_key"] == key for p in self.s.wireguard.peers.values()):
            raise VppError(E.ENTRY_ALREADY_EXISTS)
        index = self.s.wireguard.next_peer
        self.s.wireguard.next_peer += 1
        self.s.wireguard.peers[index] = {
            "public_key": key, "port": int(peer.port),
            "persistent_keepalive": int(peer.persistent_keepalive),
            "table_id": int(peer.table_id), "endpoint": str(peer.endpoint), "sw_if_index": sw,
            "allowed_ips": list(peer.allowed_ips[:int(peer.n_allowed_ips)]),
        }
        return {"peer_index": index}

    def wireguard_peer_remove(self, req: Any) -> Fields:
        if self.s.wireguard.peers.pop(int(req.peer_index), None) is None:
            raise VppError(E.NO_SUCH_ENTRY)
        return {}

    def wireguard_peers_dump(self, req: Any) -> list[Fields]:
        return [
            {"peer": {"peer_index": index, **{k: v for k, v in p.items() if k != "allowed_ips"},
                      "flags": 0, "n_allowed_ips": len(p["allowed_ips"]),
                      "allowed_ips": p["allowed_ips"]}}
            for index, p in sorted(self.s.wireguard.peers.items())
            if int(req.peer_index) in (ANY, index)
        ]
