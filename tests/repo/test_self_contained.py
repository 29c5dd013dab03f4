"""The checkout is self-contained: nothing the tests, benchmarks, demo or set-up run names a path
of the machines the project was written on, and the VPP definitions the fake VPP loads are part of
the checkout with their licence note.

A public clone has no steering folder beside it and no /work; a test reading either would pass
here and fail there (as tests/vpp once did with VPP's definitions).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.fakevpp import API_DIR
from tests.fakevpp.codec import load_schema

REPO = Path(__file__).resolve().parents[2]
SCANNED = ["tests", "testbed", "benchmarks", "agent", "cni_client", "ipam", "policy", "services",
           "vswitchctl", "demo.py", "demo_cluster.py", "Makefile", ".ci"]
# Written in pieces so that this file does not match itself.
OUTSIDE = re.compile("/" + "work/" + r"|\.\./" + "shared" + "|shared/" + "vpp-api")


def _files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        path = REPO / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        out += [p for p in candidates if p.is_file() and "__pycache__" not in p.parts
                and p.suffix not in (".json", ".pyc") and "bin" not in p.relative_to(REPO).parts]
    return out


def test_no_file_names_a_path_outside_the_checkout() -> None:
    files = _files()
    assert len(files) > 100, files  # the scan really covered the tree
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
            for p in files
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == []


def test_vpp_definitions_live_in_the_checkout_with_their_licence() -> None:
    api = Path(API_DIR)
    assert api.is_relative_to(REPO)
    assert "Apache License" in (api.parent / "LICENSE").read_text()
    assert "Apache License, Version 2.0" in " ".join((api.parent / "README.md").read_text().split())
    schema = load_schema(API_DIR)
    # The handshake, the core messages and both pod-wiring plugins the agent uses.
    for message in ("sockclnt_create", "sw_interface_dump", "ip_route_add_del",
                    "af_packet_create_v3", "tap_create_v3"):
        assert message in schema.messages, message
