"""What must hold on a node after every fault, once the runtime has done its retries.

`problems(node)` looks at the agent (REST), the kernel (links, routes) and every pod namespace,
and returns what is wrong, one line each; `assert_converged(node, context)` fails with all of
them and the context (seed, trial, operations) so a failure can be replayed:

- records: the agent's pod records are exactly the runtime's live pods, each "ready", each with
  the address its ADD answered;
- no leaked address: etcd's allocations are exactly the addresses of those records, each owned
  by its record's container, and the in-memory pool counts the same number in use;
- no duplicate address: no address in two records, and no address configured in two pods;
- no orphan link: the host links carrying the agent's interface prefix are exactly the records'
  host ends; the host routes inside the node's pod subnet are exactly the live pods' addresses;
- no netns side: a pod whose DEL the agent answered has no interface of that name left in its
  namespace (a DEL the plugin answered alone, the agent being down, may leave it: the runtime
  removes the namespace right after, and the agent's reconcile releases the rest);
  the kernel dataplane deletes a DEL's veth in the background (already down and unrouted when
  DEL answers), so links and namespaces are looked at once the agent reports none pending;
- reachable: every live pod pings its gateway and the next live pod (a ring, so n pings cover
  every pod as sender and receiver).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from typing import Any

from testbed.netns import ping, run_in
from tests.faults.node import FaultNode, Pod, host_links, pod_has_interface


def _pod_addresses(pod: Pod) -> list[str] | None:
    """IPv4 addresses on the pod's interface; None when the interface does not exist."""
    out = run_in(pod.netns, "ip", "-j", "-4", "addr", "show", "dev", pod.ifname)
    if out.returncode != 0:
        return None
    entries: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return [a["local"] for e in entries for a in e.get("addr_info", []) if "local" in a]


def _subnet_routes(node: FaultNode) -> dict[str, str]:
    """Host routes inside the node's pod subnet, dst -> device (the gateway's own excluded)."""
    out = subprocess.run(
        ["ip", "-j", "route", "show", "root", node.pod_network],
        capture_output=True, text=True, check=True,
    )
    routes: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return {
        str(r["dst"]).split("/")[0]: str(r.get("dev", ""))
        for r in routes
        if r.get("dev") != node.gateway_ifname
    }


def agent_view(node: FaultNode) -> tuple[list[dict[str, Any]], dict[str, Any], list[Any]]:
    """(records, allocations, pools) from the running agent's REST view."""
    agent = node.running
    status, pods = agent.get("/v1/pods")
    assert status == 200, f"/v1/pods answered {status}: {pods}"
    status, allocs = agent.get("/v1/allocations")
    assert status == 200, f"/v1/allocations answered {status}: {allocs}"
    status, pools = agent.get("/v1/pools")
    assert status == 200, f"/v1/pools answered {status}: {pools}"
    return pods["pods"], allocs["allocations"], pools["pools"]


def links_settled(node: FaultNode, timeout: float = 10.0) -> list[str]:
    """Waits until the agent has deleted the links of the DELs it answered; a problem line
    when it does not."""
    pending = node.running.links_settled(timeout)
    return [pending] if pending else []


def problems(node: FaultNode, reach: bool = True) -> list[str]:
    found = links_settled(node)
    records, allocations, pools = agent_view(node)
    by_key = {(r["container_id"], r["ifname"]): r for r in records}
    live = node.live

    # records == the runtime's live pods, all ready, with the addresses ADD answered
    for key in sorted(set(by_key) - set(live)):
        found.append(f"record {key} ({by_key[key]['state']}) the runtime does not have")
    for key in sorted(set(live) - set(by_key)):
        found.append(f"live pod {key} ({live[key].address}) has no record")
    for key, record in by_key.items():
        if record["state"] != "ready":
            found.append(f"record {key} is {record['state']!r}, not ready")
        pod = live.get(key)
        if pod is not None and pod.address not in record["addresses"]:
            found.append(f"record {key} holds {record['addresses']}, ADD answered {pod.address}")

    # leaks and duplicates of addresses
    recorded = [a.split("/")[0] for r in records for a in r["addresses"]]
    for ip, n in Counter(recorded).items():
        if n > 1:
            found.append(f"duplicate address {ip} in {n} records")
    owners = {a.split("/")[0]: r["container_id"] for r in records for a in r["addresses"]}
    for ip in sorted(set(allocations) - set(owners)):
        found.append(f"leaked address {ip}: allocated to {allocations[ip]} without a live record")
    for ip in sorted(set(owners) - set(allocations)):
        found.append(f"address {ip} of {owners[ip]} is recorded but not allocated")
    for ip, owner in allocations.items():
        if ip in owners and owner.get("containerId") != owners[ip]:
            found.append(f"address {ip} allocated to {owner}, recorded for {owners[ip]}")
    in_use = pools[0]["inUse"] if pools else -1
    if in_use != len(records):
        found.append(f"pool counts {in_use} addresses in use, {len(records)} records hold one")

    # links and routes: only what a live record explains
    expected_links = {r["wiring"]["host_ifname"] for r in records if r.get("wiring")}
    names = (str(link["ifname"]) for link in host_links())
    links = {name for name in names if name.startswith(node.prefix)}
    for name in sorted(links - expected_links):
        found.append(f"orphan link {name}")
    for name in sorted(expected_links - links):
        found.append(f"host link {name} of a live record is missing")
    routes = _subnet_routes(node)
    for ip in sorted(set(routes) - set(owners)):
        found.append(f"orphan host route {ip} dev {routes[ip]}")
    for ip in sorted(set(owners) - set(routes)):
        found.append(f"live address {ip} has no host route")

    # the pod side
    configured: Counter[str] = Counter()
    for pod in live.values():
        addresses = _pod_addresses(pod)
        if addresses is None:
            found.append(f"live pod {pod} has no {pod.ifname} in {pod.netns}")
            continue
        configured.update(addresses)
        if addresses != [pod.ip]:
            found.append(f"live pod {pod} has addresses {addresses}, ADD answered {pod.ip}")
    for ip, n in configured.items():
        if n > 1:
            found.append(f"duplicate address {ip} configured in {n} pods")
    for pod in node.gone.values():
        if pod_has_interface(pod):
            found.append(f"deleted pod {pod} still has {pod.ifname} in {pod.netns}")

    if reach and not found:
        found += unreachable(node)
    return found


def unreachable(node: FaultNode) -> list[str]:
    found: list[str] = []
    pods = sorted(node.live.values(), key=lambda p: p.ip)
    for i, pod in enumerate(pods):
        if not ping(pod.netns, pod.gateway):
            found.append(f"pod {pod} ({pod.ip}) cannot ping its gateway {pod.gateway}")
        peer = pods[(i + 1) % len(pods)]
        if peer is not pod and not ping(pod.netns, peer.ip):
            found.append(f"pod {pod} ({pod.ip}) cannot ping pod {peer} ({peer.ip})")
    return found


def assert_converged(node: FaultNode, context: str, reach: bool = True) -> None:
    found = problems(node, reach)
    assert not found, (
        f"{context}\n" + "\n".join(f"  - {p}" for p in found) + f"\nagent logs:\n{node.log()}"
    )


def wait_converged(node: FaultNode, context: str, timeout: float = 10.0) -> float:
    """Polls until the node converges by itself; returns the seconds it took."""
    start = time.monotonic()
    while True:
        try:
            found = problems(node, reach=False)
        except (AssertionError, OSError) as exc:  # REST 503 or refused while etcd reconnects
            found = [str(exc)]
        if not found:
            break
        if time.monotonic() - start > timeout:
            assert_converged(node, f"{context} (not converged after {timeout:.0f} s)", False)
        time.sleep(0.2)
    took = time.monotonic() - start
    assert_converged(node, context)
    return took
