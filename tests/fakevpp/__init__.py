"""A wire-level fake VPP for tests: VPP's socket API over a unix socket, with real state.

    fake = FakeVPP("/tmp/x/api.sock", API_DIR, tap_works=False)
    fake.start()
    ...  # point vpp-papi (or the VPP driver) at fake.socket_path
    fake.fail_once("sw_interface_set_table", -3)   # the next such request gets retval -3
    fake.restart()                                  # drops all state and every client
    fake.log()                                      # what a real VPP would have logged
    fake.stop()

Messages are decoded and encoded with vpp-papi's own codec from VPP's .api.json definitions
(codec.py), so a message or field VPP does not know cannot pass. The state (state.py) and
the handlers (handlers.py) follow VPP's rules and retvals.
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

from tests.fakevpp.codec import load_schema
from tests.fakevpp.handlers import Handlers
from tests.fakevpp.server import SocketServer, make_dispatch
from tests.fakevpp.state import ANY, CnatState, Interface, Route, State
from tests.fakevpp.tapdev import delete_tap_host

__all__ = ["ANY", "API_DIR", "FakeVPP", "Interface", "Route"]

# VPP 26.06's message definitions, part of this checkout (api/README.md says what and whence).
API_DIR = str(Path(__file__).resolve().with_name("api") / "26.06")


class FakeVPP:
    """A VPP stand-in serving `socket_path`; inspect its state with the methods below."""

    def __init__(
        self, socket_path: str, api_dir: str, tap_works: bool = False, netns: str = ""
    ) -> None:
        """`netns`: the namespace "VPP" runs in, where af_packet and tap host ends live."""
        self.socket_path = socket_path
        self.netns = netns
        self.schema = load_schema(api_dir)
        self.tap_works = tap_works
        self.lock = threading.Lock()
        self.failures: dict[str, int] = {}
        self.requests: list[str] = []  # names of every request received, in order
        self.state = State()
        # Lines a real VPP would log about the agent's requests, kept across restarts like
        # VPP's log file: an AF_PACKET interface deleted after its host device was gone
        # (VPP polled a dead socket), a delete of a name VPP has no binding for.
        self._log: list[str] = []
        self._handlers = Handlers(self.state, tap_works, self.schema.json_text, netns, self._log)
        dispatch = make_dispatch(
            self.schema, lambda: self._handlers, self.failures, self.lock, self.requests
        )
        self._server = SocketServer(socket_path, self.schema, dispatch)

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        """Stops serving; the state's kernel objects (tap host ends) are removed."""
        self._server.stop()
        self._drop_kernel_objects()

    def restart(self) -> None:
        """Like a VPP restart: every client is disconnected and all state is lost."""
        self._server.stop()
        self._drop_kernel_objects()
        with self.lock:
            self.state = State()
            self._handlers = Handlers(
                self.state, self.tap_works, self.schema.json_text, self.netns, self._log
            )
        self._server.start()

    def without_plugin(self, api_file: str) -> None:
        """Serves no message of `api_file` (e.g. "tapv2"), like a VPP built without that
        plugin; applies to clients that connect from now on."""
        with open(f"{self.schema.api_dir}/plugins/{api_file}.api.json") as f:
            names = {m[0] for m in json.load(f)["messages"]}
        self._server.without = names

    def set_tap_works(self, works: bool) -> None:
        with self.lock:
            self.tap_works = works
            self._handlers.tap_works = works

    def fail_once(self, message: str, retval: int = -1) -> None:
        """The next request `message` is refused with `retval` (no state change)."""
        if message not in self.schema.services:
            raise KeyError(f"VPP has no request message {message!r}")
        with self.lock:
            self.failures[message] = retval

    def _drop_kernel_objects(self) -> None:
        with self.lock:
            for itf in self.state.interfaces.values():
                if itf.dev_type == "virtio":
                    delete_tap_host(itf.host_if_name, itf.tap["netns"])

    # --- inspection ------------------------------------------------------------------------
    def log(self) -> list[str]:
        """What a real VPP would have logged because of the requests so far (see __init__)."""
        with self.lock:
            return list(self._log)

    def interfaces(self) -> dict[int, Interface]:
        with self.lock:
            return dict(self.state.interfaces)

    def interface_by_tag(self, tag: str) -> Interface | None:
        with self.lock:
            return next((i for i in self.state.interfaces.values() if i.tag == tag), None)

    def tables(self) -> set[tuple[bool, int]]:
        with self.lock:
            return set(self.state.tables)

    def routes(self, table_id: int | None = None) -> dict[tuple[int, str], Route]:
        """{(table_id, prefix): route}, optionally of one table."""
        with self.lock:
            return {
                (k[1], k[2]): r
                for k, r in self.state.routes.items()
                if table_id is None or k[1] == table_id
            }

    def neighbors(self) -> dict[tuple[int, str], tuple[str, int]]:
        """{(sw_if_index, ip): (mac, flags)}."""
        with self.lock:
            return dict(self.state.neighbors)

    def acls(self) -> dict[int, tuple[str, list[Any]]]:
        """{acl index: (tag, rules as vpp-papi decoded them)}."""
        with self.lock:
            return dict(self.state.acl.acls)

    def acl_lists(self) -> dict[int, tuple[list[int], list[int]]]:
        """{sw_if_index: (input ACLs, output ACLs)} of interfaces holding any."""
        with self.lock:
            return {sw: (list(i), list(o)) for sw, (i, o) in self.state.acl.lists.items()
                    if i or o}

    def acl_switches(self) -> tuple[bool, bool]:
        """(per-rule counters on, session reclassification on)."""
        with self.lock:
            return self.state.acl.counters_enabled, self.state.acl.reclassify_sessions

    def cnat(self) -> CnatState:
        """A copy of the cnat plugin's state (translations, SNAT entry, tables, features)."""
        with self.lock:
            return copy.deepcopy(self.state.cnat)

    def snapshot(self) -> dict[str, Any]:
        """A comparable picture of the whole state (for "nothing changed" assertions)."""
        with self.lock:
            s = self.state
            return {
                "interfaces": sorted(
                    (i.name, i.tag, i.flags, tuple(i.mtu), tuple(sorted(i.vrf.items())),
                     i.unnumbered_to, tuple(map(str, i.addresses)))
                    for i in s.interfaces.values()
                ),
                "tables": sorted(s.tables),
                "routes": sorted((k, repr(r.paths)) for k, r in s.routes.items()),
                "neighbors": sorted(s.neighbors.items()),
                "acls": sorted((i, tag, repr(rules)) for i, (tag, rules) in s.acl.acls.items()),
                "acl_lists": sorted((k, repr(v)) for k, v in s.acl.lists.items() if v[0] or v[1]),
            }
