"""agent.linux.nftelements: set and map elements over netlink, against the real kernel.

Plan:
- which `nft -j` documents are only elements (and so go over netlink), and which are not;
- elements added and deleted in IPv4 and IPv6 sets, a set of concatenations and a verdict
  map, read back with nft;
- a batch is one transaction: a refused op leaves the ops before it undone, and the error
  names the set and the kernel's reason (a missing element, a missing chain, a wrong family);
- more elements than one netlink attribute holds go in several messages of one batch;
- `run` sends anything else through libnftables.
Each test makes its own namespace and table, removed also when it fails.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.linux import nftelements
from agent.linux.nft import NftError
from agent.linux.nftelements import ElementOp, element_ops
from testbed.netns import entered, named_netns, run_in

TABLE = "tel"
SETUP = f"""
table inet {TABLE} {{
  chain target {{ }}
  set s4 {{ type ipv4_addr; }}
  set s6 {{ type ipv6_addr; }}
  map m4 {{ type ipv4_addr : verdict; }}
  set cidrs {{ type ipv4_addr; flags interval; }}
  set pairs6 {{ type ipv6_addr . ipv6_addr; }}
}}
"""


def elem(op: str, name: str, *items: object, table: str = TABLE) -> dict[str, Any]:
    return {op: {"element": {"family": "inet", "table": table, "name": name,
                             "elem": list(items)}}}


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[str]:
    setup = tmp_path / "table.nft"
    setup.write_text(SETUP)
    with named_netns("tel") as path:
        made = run_in(path, "nft", "-f", str(setup))
        assert made.returncode == 0, made.stderr
        with entered(path):
            yield path


def held(path: str, name: str) -> set[Any]:
    out = json.loads(run_in(path, "nft", "-j", "list", "table", "inet", TABLE).stdout)
    for obj in out["nftables"]:
        body = obj.get("set") or obj.get("map")
        if body and body["name"] == name:
            return {e if isinstance(e, str) else json.dumps(e) for e in body.get("elem", ())}
    raise AssertionError(f"no {name} in the table")


def test_only_plain_address_elements_are_element_ops() -> None:
    ops = element_ops([elem("add", "s4", "10.0.0.1", "10.0.0.2"),
                       elem("delete", "s6", "fd00::1"),
                       elem("add", "m4", ["10.0.0.3", {"jump": {"target": "target"}}]),
                       elem("add", "pairs6", {"concat": ["fd00::1", "fd00::2"]})],
                      "inet", TABLE)
    assert ops == [
        ElementOp("add", "s4", (ipaddress.ip_address("10.0.0.1"),
                                ipaddress.ip_address("10.0.0.2"))),
        ElementOp("delete", "s6", (ipaddress.ip_address("fd00::1"),)),
        ElementOp("add", "m4", (ipaddress.ip_address("10.0.0.3"),), (("jump", "target"),)),
        ElementOp("add", "pairs6", ((ipaddress.ip_address("fd00::1"),
                                     ipaddress.ip_address("fd00::2")),))]
    assert element_ops([], "inet", TABLE) == []
    for other in ([{"add": {"chain": {"family": "inet", "table": TABLE, "name": "x"}}}],
                  [elem("add", "s4", "10.0.0.1"), {"flush": {"set": {"name": "s4"}}}],
                  [elem("add", "cidrs", {"prefix": {"addr": "10.0.0.0", "len": 8}})],
                  [elem("add", "s4", "not-an-address")],
                  [elem("add", "s4", 80)],  # a number is no address here (a port, a mark)
                  [elem("add", "s4", {"concat": ["10.0.0.1", 80]})],
                  [{"add": {"element": {"family": "inet", "table": TABLE, "elem": ["10.0.0.1"]}}}],
                  [elem("add", "s4", "10.0.0.1", table="another")],
                  [elem("add", "m4", ["10.0.0.3", {"accept": None}])],
                  [elem("add", "m4", ["10.0.0.3", {"jump": {"target": "target"}}], "10.0.0.4")],
                  [elem("delete", "m4", ["10.0.0.3", {"jump": {"target": "target"}}])]):
        assert element_ops(other, "inet", TABLE) is None, other


def test_elements_added_and_deleted_in_sets_and_a_verdict_map(ns: str) -> None:
    nftelements.run([elem("add", "s4", "10.0.0.1", "10.0.0.2"),
                     elem("add", "s6", "fd00::1"),
                     elem("add", "m4", ["10.0.0.1", {"jump": {"target": "target"}}],
                          ["10.0.0.2", {"goto": {"target": "target"}}])], "inet", TABLE)
    assert held(ns, "s4") == {"10.0.0.1", "10.0.0.2"}
    assert held(ns, "s6") == {"fd00::1"}
    assert held(ns, "m4") == {json.dumps(["10.0.0.1", {"jump": {"target": "target"}}]),
                              json.dumps(["10.0.0.2", {"goto": {"target": "target"}}])}
    nftelements.run([elem("delete", "s4", "10.0.0.1"), elem("delete", "m4", "10.0.0.2"),
                     elem("add", "s4", "10.0.0.3")], "inet", TABLE)
    assert held(ns, "s4") == {"10.0.0.2", "10.0.0.3"}
    assert held(ns, "m4") == {json.dumps(["10.0.0.1", {"jump": {"target": "target"}}])}
    pair = {"concat": ["fd00::1", "fd00::2"]}
    nftelements.run([elem("add", "pairs6", pair)], "inet", TABLE)
    assert held(ns, "pairs6") == {json.dumps(pair)}
    nftelements.run([elem("delete", "pairs6", pair)], "inet", TABLE)
    assert held(ns, "pairs6") == set()
    # adding what is there already is no error (nft's `add`, not `create`)
    nftelements.run([elem("add", "s4", "10.0.0.2")], "inet", TABLE)
    assert held(ns, "s4") == {"10.0.0.2", "10.0.0.3"}


@pytest.mark.parametrize(("bad", "says"), [
    (elem("delete", "s4", "10.9.9.9"), "delete element inet tel s4: No such file"),
    (elem("add", "m4", ["10.9.9.9", {"jump": {"target": "nochain"}}]),
     "add element inet tel m4: No such file"),
    (elem("add", "s6", "10.9.9.9"), "add element inet tel s6: Invalid argument"),
    (elem("add", "absent", "10.9.9.9"), "add element inet tel absent: No such file"),
])
def test_a_refused_op_undoes_the_whole_batch_and_names_the_set(
        ns: str, bad: dict[str, Any], says: str) -> None:
    nftelements.run([elem("add", "s4", "10.0.0.1")], "inet", TABLE)
    with pytest.raises(NftError, match=says):
        nftelements.run([elem("add", "s4", "10.0.0.2"), elem("delete", "s4", "10.0.0.1"), bad],
                        "inet", TABLE)
    assert held(ns, "s4") == {"10.0.0.1"}


def test_more_elements_than_one_message_holds_are_one_batch(ns: str) -> None:
    many = [str(ipaddress.ip_address(0x0A000000 + i)) for i in range(12_000)]
    data, seqs = nftelements.batch("inet", TABLE, element_ops([elem("add", "s4", *many)],
                                                              "inet", TABLE) or [])
    assert len(seqs) > 1 and len(data) > 65_536
    nftelements.run([elem("add", "s4", *many)], "inet", TABLE)
    assert held(ns, "s4") == set(many)
    # one refused element at the end undoes every message of the batch
    with pytest.raises(NftError, match="No such file"):
        nftelements.run([elem("delete", "s4", *many, "11.0.0.1")], "inet", TABLE)
    assert len(held(ns, "s4")) == len(many)
    nftelements.run([elem("delete", "s4", *many)], "inet", TABLE)
    assert held(ns, "s4") == set()


def test_anything_else_goes_through_libnftables(ns: str) -> None:
    nftelements.run([{"add": {"chain": {"family": "inet", "table": TABLE, "name": "later"}}},
                     elem("add", "m4", ["10.0.0.5", {"jump": {"target": "later"}}]),
                     elem("add", "cidrs", {"prefix": {"addr": "10.8.0.0", "len": 16}})],
                    "inet", TABLE)
    assert held(ns, "m4") == {json.dumps(["10.0.0.5", {"jump": {"target": "later"}}])}
    assert held(ns, "cidrs") == {json.dumps({"prefix": {"addr": "10.8.0.0", "len": 16}})}
