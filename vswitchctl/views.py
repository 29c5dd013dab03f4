"""What each vswitchctl command shows, as data: a `View` holds the JSON/YAML document, the table
(columns and rows), and the agents that did not answer (the command still shows what etcd knows,
then exits 4).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.model.node import fingerprint
from agent.model.pod import PodRecord, pod_label
from vswitchctl.sources import Agent, AgentDown, Cluster, Node, NotFound, agent_url


@dataclass
class View:
    document: Any
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    agent_errors: list[str] = field(default_factory=list)
    failed: bool = False  # what was checked is not right (a pod's live check): exit 1


@dataclass
class Context:
    cluster: Cluster
    default_port: int  # REST port when a registry entry names none (the config's HTTPAddress)
    agent_override: str = ""  # --agent URL: used for every node's agent

    def agent(self, node: Node) -> Agent | None:
        url = self.agent_override or agent_url(node, self.default_port)
        return Agent(url) if url else None


def _ask(ctx: Context, node: Node, errors: list[str], fn: Callable[[Agent], Any]) -> Any:
    """fn(agent of node), or None with the reason recorded when the agent cannot answer."""
    agent = ctx.agent(node)
    if agent is None:
        errors.append(f"node {node.name}: no registry entry, so no agent address (use --agent)")
        return None
    try:
        return fn(agent)
    except AgentDown as exc:
        errors.append(str(exc))
        return None


def _check(ctx: Context, node: Node, record: PodRecord,
           errors: list[str]) -> dict[str, Any] | str:
    """The live check of `record` by its node's agent, or why it did not run. An agent that
    does not answer, or that has no such attachment although etcd still records it on the
    agent's node (`--agent` naming another node's agent, say), is an error in `errors`; an
    attachment deleted since etcd was read is not."""
    agent = ctx.agent(node)
    if agent is None:
        errors.append(f"node {node.name}: no registry entry, so no agent address (use --agent)")
        return "not run (no agent address)"
    try:
        answer = agent.check(record.container_id, record.ifname)
    except AgentDown as exc:
        errors.append(str(exc))
        return "not run (its agent did not answer)"
    if answer is not None:
        return answer
    if not any(r.key == record.key for r in ctx.cluster.pods(node.node_id)):
        return "not run (the attachment was deleted meanwhile)"
    hint = " (is --agent that node's agent?)" if ctx.agent_override else ""
    errors.append(f"agent at {agent.url} has no attachment {record.container_id}/"
                  f"{record.ifname}, which etcd records on node {node.name}{hint}")
    return "not run (its agent does not know it)"


def _mesh_summary(snapshot: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    if snapshot is None:
        return "unknown (agent down)", {}
    remotes = {n["name"]: n.get("mesh", {}) for n in snapshot.get("nodes", [])
               if n.get("mesh", {}).get("state") != "local"}
    good = sum(1 for m in remotes.values() if m.get("state") == "programmed")
    text = f"programmed {good}/{len(remotes)}"
    bad = sorted(name for name, m in remotes.items() if m.get("state") != "programmed")
    if bad:
        text += " (not: " + ", ".join(bad) + ")"
    return text, remotes


def nodes(ctx: Context) -> View:
    view = View([], ["ID", "NAME", "NODE-IP", "POD-SUBNETS", "VPP-HOST-SUBNET", "AGENT", "MESH"])
    for node in ctx.cluster.nodes():
        snapshot = _ask(ctx, node, view.agent_errors, lambda a: a.get("/v1/nodes"))
        mesh, remotes = _mesh_summary(snapshot)
        info = node.info
        agent = ctx.agent(node)
        doc = {"id": node.node_id, "name": node.name, "live": node.alive,
               "agent": agent.url if agent else None,
               "agentAnswered": snapshot is not None, "mesh": remotes, "meshSummary": mesh,
               **({"registry": info.to_json()} if info else {"registry": None})}
        view.document.append(doc)
        view.rows.append([
            str(node.node_id), node.name, info.node_ip if info else "-",
            ",".join(info.pod_subnets) if info else "-", info.vpp_host_subnet if info else "-",
            ("live" if node.alive else "down") + ("" if snapshot is not None else ", no answer"),
            mesh,
        ])
    return view


def wireguard(ctx: Context) -> View:
    """One row per node and peer: the node's key fingerprint (from the registry), the peer's,
    its last handshake and bytes (from the node's agent, which reads its device every 2 s)."""
    view = View([], ["NODE", "KEY", "PEER", "PEER-KEY", "ENDPOINT", "HANDSHAKE", "RX", "TX"])
    now = time.time()
    for node in ctx.cluster.nodes():
        key = node.info.wg_public_key if node.info else ""
        snapshot = _ask(ctx, node, view.agent_errors, lambda a: a.get("/v1/nodes"))
        device = (snapshot or {}).get("wireguard")
        view.document.append({"name": node.name, "publicKey": key,
                              "fingerprint": fingerprint(key), "device": device})
        if not device:
            state = "off" if snapshot is not None else "no answer"
            view.rows.append([node.name, fingerprint(key) or "-", f"({state})", "", "", "", "",
                              ""])
            continue
        for peer in device["peers"] or [{}]:
            seen = peer.get("latestHandshake", 0)
            if seen is None:  # VPP's own WireGuard: only whether a session is established
                handshake = "established" if peer.get("established") else "no session"
            else:
                handshake = f"{now - seen:.0f}s ago" if seen else "never"
            view.rows.append([
                node.name, fingerprint(key) or "-", peer.get("node") or "?",
                peer.get("fingerprint", ""), peer.get("endpoint", ""), handshake,
                _count(peer.get("rxBytes", "")), _count(peer.get("txBytes", "")),
            ])
    return view


def _count(value: object) -> str:
    return "-" if value is None else str(value)


def _selected(ctx: Context, node_name: str | None) -> list[Node]:
    if node_name:
        return [ctx.cluster.node(node_name)]
    return ctx.cluster.nodes()


def pods(ctx: Context, node_name: str | None, namespace: str | None) -> View:
    view = View([], ["NODE", "POD", "CONTAINER", "IFNAME", "ADDRESSES", "HOST-IF", "STATE"])
    for node in _selected(ctx, node_name):
        for record in ctx.cluster.pods(node.node_id):
            if namespace is not None and record.pod_namespace != namespace:
                continue
            label = pod_label(record.pod_namespace, record.pod_name)
            view.document.append({"node": node.name, "pod": label, **record.to_json_dict()})
            view.rows.append([node.name, label, record.container_id[:12], record.ifname,
                              ",".join(record.addresses),
                              str(record.wiring.get("host_ifname", "-")), record.state])
    return view


def find(ctx: Context, which: str) -> list[tuple[Node, PodRecord]]:
    found = []
    for node in ctx.cluster.nodes():
        for record in ctx.cluster.pods(node.node_id):
            label = f"{record.pod_namespace}/{record.pod_name}"
            if which in (record.container_id, label) or (
                len(which) >= 6 and record.container_id.startswith(which)
            ):
                found.append((node, record))
    return found


def pod(ctx: Context, which: str) -> View:
    found = find(ctx, which)
    if not found:
        raise NotFound(f"no pod {which!r} (NAMESPACE/NAME, a container ID or its first 6+ "
                       "characters) in any node's records")
    view = View([], ["FIELD", "VALUE"])
    for node, record in found:
        check = _check(ctx, node, record, view.agent_errors)
        doc: dict[str, Any] = {"node": node.name, "record": record.to_json_dict()}
        if isinstance(check, str):
            doc.update(check=None, checkNotRun=check)
        else:
            doc["check"] = _without_record(check)
        view.document.append(doc)
        if isinstance(check, str) or not check.get("ok"):
            view.failed = True  # exit 1, or 4 when an agent is among the reasons
        view.rows += _pod_rows(node, record, check)
    return view


def _without_record(check: dict[str, Any]) -> dict[str, Any]:
    """The check's outcome; its copy of the record is the one shown beside it."""
    return {k: v for k, v in check.items() if k != "record"}


def _pod_rows(node: Node, record: PodRecord, check: dict[str, Any] | str) -> list[list[str]]:
    rows = [["node", f"{node.name} (ID {node.node_id})"],
            ["pod", pod_label(record.pod_namespace, record.pod_name)]]
    for key, value in record.to_json_dict().items():
        if key not in ("pod_namespace", "pod_name"):
            rows.append([key, _text(value)])
    if isinstance(check, str):
        rows.append(["check", check])
    else:
        rows.append(["check", "ok" if check.get("ok") else "FAILED"])
        rows += [["problem", p] for p in check.get("problems", [])]
    return rows


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, list):
        return ",".join(map(_text, value)) or "-"
    return str(value)


def ipam(ctx: Context, node_name: str | None) -> View:
    view = View([], ["NODE", "SUBNET", "CAPACITY", "IN-USE", "FREE", "LEAK-CANDIDATES"])
    for node in _selected(ctx, node_name):
        records = ctx.cluster.pods(node.node_id)
        allocations = ctx.cluster.allocations(node.node_id)
        pools = _ask(ctx, node, view.agent_errors, lambda a: a.get("/v1/pools"))
        leaks = _leaks(ctx, node, records, allocations, view.agent_errors)
        view.document.append({"node": node.name, "id": node.node_id,
                              "pools": pools["pools"] if pools else None,
                              "allocations": len(allocations), "leakCandidates": leaks})
        text = "; ".join(f"{x['kind']} {x['what']}" for x in leaks) or "none"
        for p in (pools or {}).get("pools", []) or [{"subnet": "(agent down)"}]:
            view.rows.append([node.name, str(p["subnet"]), str(p.get("capacity", "-")),
                              str(p.get("inUse", "-")), str(p.get("free", "-")), text])
    return view


def _leaks(ctx: Context, node: Node, records: list[PodRecord],
           allocations: dict[str, dict[str, Any]], errors: list[str]) -> list[dict[str, str]]:
    """Allocations no record owns (etcd), and records whose netns is gone (the agent checks,
    as only the node sees its netns paths)."""
    owned = {(r.container_id, r.ifname) for r in records}
    leaks = [{"kind": "allocation-without-record", "what": ip,
              "owner": f"{o.get('container_id', '')}/{o.get('ifname', '')}"}
             for ip, o in sorted(allocations.items())
             if (o.get("container_id"), o.get("ifname")) not in owned]
    before = len(errors)
    for record in records:
        check = _check(ctx, node, record, errors)
        if isinstance(check, dict) and any("is gone" in p for p in check.get("problems", [])):
            leaks.append({"kind": "netns-gone", "what": f"{record.container_id}/{record.ifname}",
                          "owner": pod_label(record.pod_namespace, record.pod_name),
                          "netns": record.netns})
        if len(errors) > before:
            break  # the agent does not answer: one error says it
    return leaks
