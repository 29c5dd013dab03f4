"""`vswitchctl`: the operator's view of a vswitch-cni cluster, from etcd and the agents' REST.

    vswitchctl [--config FILE | --etcd URL[,URL]] [--agent URL] [-o table|json|yaml] COMMAND
      nodes                          every node: ID, name, node IP, subnets, agent, mesh state
      pods [--node N] [-n NS]        pod attachments from etcd
      pod NAMESPACE/NAME|CONTAINER   the whole record plus a live check through its agent
      ipam [--node N]                pools per node, use, and leak candidates
      node remove NAME [--force]     remove a node (the agent's own removal transaction)

Exit status: 0 ok; 1 not found, refused, or a pod's live check found problems; 2 bad usage or
config; 3 etcd unreachable (nothing shown); 4 an agent did not answer (what etcd knows is shown,
then one line per agent on stderr). Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from agent.cluster.remove import RemoveRefused
from agent.config import ConfigError, check_etcd_tls, load
from agent.errors import CniError
from vswitchctl import views
from vswitchctl.output import FORMATS, render
from vswitchctl.sources import AgentDown, Cluster, EtcdDown, NotFound

DEFAULT_CONFIG = "/etc/vswitch-cni/agent.yaml"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ETCD, EXIT_AGENT = 0, 1, 2, 3, 4


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vswitchctl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help=f"the agent's config file (default {DEFAULT_CONFIG}): "
                                     "etcd endpoints, prefix and REST port")
    p.add_argument("--etcd", help="etcd endpoints, comma-separated (instead of the config's)")
    p.add_argument("--prefix", help="the agent's etcd prefix (default: the config's)")
    p.add_argument("--agent", help="an agent's REST URL, used instead of the registry's address")
    p.add_argument("-o", "--output", choices=FORMATS, default="table")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("nodes", help="the nodes of the cluster")
    pods = sub.add_parser("pods", help="pod attachments")
    pods.add_argument("--node", help="only this node's")
    pods.add_argument("-n", "--namespace", help="only this pod namespace's")
    one = sub.add_parser("pod", help="one pod's record and a live check")
    one.add_argument("which", help="NAMESPACE/NAME, a container ID or its first 6+ characters")
    ipam = sub.add_parser("ipam", help="pools, use and leak candidates")
    ipam.add_argument("--node", help="only this node")
    node = sub.add_parser("node", help="node operations")
    node_sub = node.add_subparsers(dest="action", required=True)
    rm = node_sub.add_parser("remove", help="remove a node from the cluster")
    rm.add_argument("name")
    rm.add_argument("--force", action="store_true", help="also when its agent is live")
    return p


def connect(args: argparse.Namespace) -> tuple[Cluster, int]:
    """The etcd view and the default REST port, from --etcd/--prefix or the config file.

    The config's TLS files (EtcdCAFile, EtcdCertFile, EtcdKeyFile) are the agent's, checked as
    the agent checks them; https:// endpoints given with --etcd use them too. Raises
    ConfigError, or CniError for endpoints the store refuses (https:// without a config)."""
    if args.etcd and not args.config:
        endpoints = [e.strip() for e in args.etcd.split(",") if e.strip()]
        return Cluster(endpoints, args.prefix or "/vswitch-cni/", 2.0), 9999
    cfg = load(args.config or DEFAULT_CONFIG)
    check_etcd_tls(cfg)
    endpoints = ([e.strip() for e in args.etcd.split(",") if e.strip()] if args.etcd
                 else list(cfg.etcd_endpoints))
    tls = cfg.etcd_tls if all(e.startswith("https://") for e in endpoints) else None
    return (Cluster(endpoints, args.prefix or cfg.etcd_prefix, cfg.etcd_timeout, tls),
            cfg.http_host_port[1])


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
    except (ConfigError, CniError) as exc:
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
