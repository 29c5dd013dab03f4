"""`vswitch-agent --config FILE`: the per-node agent's command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

from agent import __version__
from agent.app.agent import WORKER_PREFIX, Agent, StartupError
from agent.app.config import AgentConfig, ConfigError, check_etcd_tls, load
from agent.app.node_commands import node_command
from agent.app.preflight import preflight
from agent.app.teardown import teardown
from agent.app.wireguard_commands import wireguard_command
from agent.infra import logs
from agent.model.errors import CniError

log = logging.getLogger("vswitch-agent")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vswitch-agent", description=__doc__)
    parser.add_argument("--config", required=True, help="the agent's YAML config file")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--log-format", choices=logs.FORMATS, default="text",
                        help="text lines (default) or one JSON object per line")
    parser.add_argument("--teardown", action="store_true",
                        help="remove the agent's host state (gateway interface, pod links, "
                             "routes) and exit; refused while an agent runs")
    parser.add_argument("--version", action="version", version=f"vswitch-agent {__version__}")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="operator command: node remove NAME [--force] | node list | "
                             "wireguard rotate | wireguard show")
    args = parser.parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    if args.command:  # an operator command: the config names etcd, nothing starts
        if args.command[0] not in ("node", "wireguard"):
            parser.error(f"unknown command {args.command[0]!r} (commands: node, wireguard)")
        try:
            config = load(args.config)
            check_etcd_tls(config)
        except ConfigError as exc:
            log.error("bad config: %s", exc)
            return 2
        if args.command[0] == "wireguard":
            return wireguard_command(config, args.command[1:])
        return node_command(config, args.command[1:])
    try:
        config = load(args.config)
        if args.teardown:  # removes state: needs no REST port nor a writable socket directory
            return _teardown(config)
        preflight(config)
        agent = Agent(config)
    except (ConfigError, CniError) as exc:  # CniError: a value only a constructor could judge
        log.error("refusing to start: %s", exc)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: draining and stopping", signum)
        stop.set()
        agent.interrupt()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.start()
    except (StartupError, CniError) as exc:
        log.error("cannot start: %s", exc)
        agent.stop(grace=0)
        return 1
    # Timed waits, not one endless wait: the kernel may hand SIGTERM to any of the agent's
    # threads, and then Python runs the handler only once the main thread wakes up; a main
    # thread asleep in an untimed wait never would (CI saw a SIGTERM ignored for 60 s).
    while not stop.wait(0.5):
        pass
    agent.stop()
    log.info("stopped")
    _exit_past_stuck_workers()
    return 0


def _teardown(config: AgentConfig) -> int:
    try:
        removed = teardown(config)
    except (StartupError, CniError) as exc:
        log.error("teardown refused: %s", exc)
        return 1
    for what in removed:
        print(f"removed {what}")
    print(f"host state of node {config.node_name!r} removed ({len(removed)} items); its etcd "
          "records stay until `python -m agent.nodes release` frees the node ID")
    return 0


def _exit_past_stuck_workers(wait: float = 2.0) -> None:
    """Ends the process although a worker is still in a request.

    The gRPC server's grace period is over and every call it had is cancelled, but Python cannot
    end a thread: a worker stuck in a request (a wedged syscall, a lock that never comes) would
    keep the interpreter waiting at exit (concurrent.futures joins its workers), for ever. Idle
    workers end within `wait`; if one does not, nothing is left to flush (the agent is stopped,
    pods stay wired) and the process ends without it."""
    deadline = time.monotonic() + wait
    workers = [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX)]
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in workers if t.is_alive()]
    if not stuck:
        return
    log.error("%d worker threads still in a request (%s): exiting without them",
              len(stuck), ", ".join(stuck[:5]))
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
