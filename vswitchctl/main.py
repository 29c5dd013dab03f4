"""`vswitchctl`: the operator's view of a vswitch-cni cluster, from etcd and the agents' REST.

    vswitchctl COMMAND [--config FILE | --etcd URL[,URL]] [--prefix P] [--agent URL] [-o FORMAT]
      nodes                          every node: ID, name, node IP, subnets, agent, mesh state
      pods [--node N] [-n NS]        pod attachments from etcd
      pod NAMESPACE/NAME|CONTAINER   the whole record plus a live check through its agent
      policy NAMESPACE/NAME          the NetworkPolicy rules in force for a pod, and the
                                     policies each came from (from its node's agent)
      ipam [--node N]                pools per node, use, and leak candidates
      wireguard                      with Encryption: wireguard, each node's key fingerprint
                                     and, per peer, the last handshake and the bytes
      node remove NAME [--force]     remove a node (the agent's own removal transaction)

The options --config, --etcd, --prefix, --agent and -o/--output go before or after the command
(`vswitchctl -o json nodes` and `vswitchctl nodes -o json` are the same); given in both places,
the one after the command counts. FORMAT: table (default), json or yaml.

Exit status: 0 ok; 1 not found, refused, or a pod's live check found problems; 2 bad usage or
config; 3 etcd unreachable (nothing shown); 4 an agent did not answer, or does not know a pod
that etcd records on its node (what etcd knows is shown, then one line per agent on stderr).
Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import urlsplit

from agent.app.config import ConfigError, brief, check_etcd_tls, etcd_endpoints, etcd_prefix, load
from agent.model.errors import CniError
from agent.state.node_removal import RemoveRefused
from vswitchctl import policy_view, views
from vswitchctl.output import FORMATS, render
from vswitchctl.sources import AgentDown, Cluster, EtcdDown, NotFound

DEFAULT_CONFIG = "/etc/vswitch-cni/agent.yaml"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ETCD, EXIT_AGENT = 0, 1, 2, 3, 4


def _global_options(after_command: bool) -> argparse.ArgumentParser:
    """The options every command takes. After the command their defaults are SUPPRESS, so
    that a command's parser sets them only when they are given there (argparse would
    otherwise overwrite a value given before the command with the default)."""
    g = argparse.ArgumentParser(add_help=False)

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    g.add_argument("--config", default=default(None),
                   help=f"the agent's config file (default {DEFAULT_CONFIG}): etcd endpoints, "
                        "prefix and REST port")
    g.add_argument("--etcd", default=default(None),
                   help="etcd endpoints, comma-separated (instead of the config's)")
    g.add_argument("--prefix", default=default(None),
                   help="the agent's etcd prefix (default: the config's)")
    g.add_argument("--agent", default=default(None),
                   help="an agent's REST URL, used instead of the registry's address")
    g.add_argument("-o", "--output", choices=FORMATS, default=default("table"))
    return g


def parser() -> argparse.ArgumentParser:
    common = [_global_options(after_command=True)]
    p = argparse.ArgumentParser(prog="vswitchctl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                parents=[_global_options(after_command=False)])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("nodes", help="the nodes of the cluster", parents=common)
    pods = sub.add_parser("pods", help="pod attachments", parents=common)
    pods.add_argument("--node", help="only this node's")
    pods.add_argument("-n", "--namespace", help="only this pod namespace's")
    one = sub.add_parser("pod", help="one pod's record and a live check", parents=common)
    one.add_argument("which", help="NAMESPACE/NAME, a container ID or its first 6+ characters")
    pol = sub.add_parser("policy", help="the NetworkPolicy rules in force for a pod",
                         parents=common)
    pol.add_argument("which", help="NAMESPACE/NAME")
    ipam = sub.add_parser("ipam", help="pools, use and leak candidates", parents=common)
    ipam.add_argument("--node", help="only this node")
    sub.add_parser("wireguard", help="keys, handshakes and bytes per WireGuard peer",
                   parents=common)
    node = sub.add_parser("node", help="node operations", parents=common)
    node_sub = node.add_subparsers(dest="action", required=True)
    rm = node_sub.add_parser("remove", help="remove a node from the cluster", parents=common)
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true", help="also when its agent is live")
    return p


def connect(args: argparse.Namespace) -> tuple[Cluster, int]:
    """The etcd view and the default REST port, from --etcd/--prefix or the config file.

    The config's TLS files (EtcdCAFile, EtcdCertFile, EtcdKeyFile) are the agent's, checked as
    the agent checks them; https:// endpoints given with --etcd use them too. Raises
    ConfigError for a bad config file or option value, or CniError for endpoints the store
    refuses (https:// without a config)."""
    if args.agent:
        _check_agent_url(args.agent)
    given = list(etcd_endpoints("--etcd", args.etcd)) if args.etcd else None
    prefix = etcd_prefix("--prefix", args.prefix) if args.prefix else None
    if given and not args.config:
        return Cluster(given, prefix or "/vswitch-cni/", 2.0), 9999
    cfg = load(args.config or DEFAULT_CONFIG)
    check_etcd_tls(cfg)
    endpoints = given or list(cfg.etcd_endpoints)
    tls = cfg.etcd_tls if all(e.startswith("https://") for e in endpoints) else None
    return (Cluster(endpoints, prefix or cfg.etcd_prefix, cfg.etcd_timeout, tls),
            cfg.http_host_port[1])


def _check_agent_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        raise ConfigError("--agent", url, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ConfigError("--agent", url, "must be an agent's REST URL like http://10.0.0.1:9999")


def run(args: argparse.Namespace, ctx: views.Context) -> int:
    if args.command == "node":
        node_id = ctx.cluster.remove_node(args.name, args.force)
        print(f"removed node {args.name} (ID {node_id} is free again)")
        return EXIT_OK
    if args.command == "nodes":
        view = views.nodes(ctx)
    elif args.command == "pods":
        view = views.pods(ctx, args.node, args.namespace)
    elif args.command == "pod":
        view = views.pod(ctx, args.which)
    elif args.command == "policy":
        view = policy_view.policy(ctx, args.which)
    elif args.command == "wireguard":
        view = views.wireguard(ctx)
    else:
        view = views.ipam(ctx, args.node)
    sys.stdout.write(render(view, args.output))
    for error in view.agent_errors:
        print(f"vswitchctl: {error}", file=sys.stderr)
    if view.agent_errors:
        return EXIT_AGENT
    return EXIT_FAILED if view.failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cluster, port = connect(args)
    except ConfigError as exc:
        if exc.key.startswith("--"):  # an option's value, not the config file's
            print(f"vswitchctl: {exc.key} {brief(exc.value)}: {exc.reason}", file=sys.stderr)
        else:
            print(f"vswitchctl: bad config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CniError as exc:
        print(f"vswitchctl: bad config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run(args, views.Context(cluster, port, args.agent or ""))
    except EtcdDown as exc:
        print(f"vswitchctl: {exc}", file=sys.stderr)
        return EXIT_ETCD
    except AgentDown as exc:
        print(f"vswitchctl: {exc}", file=sys.stderr)
        return EXIT_AGENT
    except (NotFound, RemoveRefused) as exc:
        print(f"vswitchctl: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
