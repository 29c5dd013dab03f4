"""`vswitchctl policy NAMESPACE/NAME`: the NetworkPolicy rules in force for a pod, from the
agent of the node it runs on (REST `/v1/policy/<namespace>/<name>`), and the policies each rule
came from."""

from __future__ import annotations

import urllib.parse
from typing import Any

from vswitchctl.sources import AgentDown, NotFound
from vswitchctl.views import Context, View, find


def policy(ctx: Context, which: str) -> View:
    namespace, _, name = which.partition("/")
    if not namespace or not name or "/" in name:
        raise NotFound(f"{which!r}: give the pod as NAMESPACE/NAME")
    nodes = {node.name: node for node, _ in find(ctx, which)}
    if not nodes:
        raise NotFound(f"no pod {which!r} in any node's records")
    view = View([], ["NODE", "ADDRESSES", "DIRECTION", "PEERS", "PORTS", "POLICIES"])
    path = "/v1/policy/" + "/".join(urllib.parse.quote(p, safe="") for p in (namespace, name))
    for node in nodes.values():
        agent = ctx.agent(node)
        if agent is None:
            view.agent_errors.append(f"node {node.name}: no agent address (use --agent)")
            continue
        try:
            shown = agent.get(path, missing="no pod ")
        except AgentDown as exc:
            view.agent_errors.append(str(exc))
            continue
        if shown is None:
            view.rows.append([node.name, "-", "both", "(no rules: NetworkPolicy allows all)",
                              "", ""])
            continue
        view.document.append(shown)
        for attachment in shown["attachments"]:
            view.rows += _rows(node.name, attachment)
    return view


def _rows(node: str, attachment: dict[str, Any]) -> list[list[str]]:
    addresses = ",".join(attachment["addresses"])
    rows = []
    for direction in ("ingress", "egress"):
        rules = attachment[direction]
        if not rules["isolated"]:
            rows.append([node, addresses, direction, "(not isolated: all allowed)", "", ""])
            continue
        if not rules["rules"]:
            rows.append([node, addresses, direction, "(isolated: nothing allowed)", "", ""])
        for rule in rules["rules"]:
            ports = rule["ports"]
            rows.append([node, addresses, direction, ",".join(rule["peers"]),
                         ports if isinstance(ports, str) else ",".join(ports),
                         ",".join(rule["policies"])])
        rows.append([node, addresses, direction, "node: " + ",".join(attachment["exempt"]),
                     "all traffic", "(always allowed)"])
    return rows
