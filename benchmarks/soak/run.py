"""Pod churn for hours (issue #27): a node keeps N live pods while pods are added and deleted
through the real plugin, every cycle checked, the node's state recorded over time.

    python -m benchmarks run soak [--pods 50] [--minutes 20] [--cycles K] [--window 50]
                              [--dataplane kernel|vpp|both] [--out BENCHMARKS.md] [--json F]

A real etcd, a real agent process and the real plugin driven through libcni (testbed/,
benchmarks/core/harness.py). One cycle: the oldest pod stops (its servers close), its DEL, its
namespace removed (as a runtime does); a new pod's namespace, its ADD, its servers; then the new pod
reaches a random older pod over TCP, the Service stand-in (a DNAT on the node, as kube-proxy
makes: testbed/service) is pointed at another pod and answers the new one over TCP and UDP.
Every `--window` cycles a sample (benchmarks/soak/sample.py): agent RSS, threads, fds, CPU; VPP
heap, RSS, interfaces, routes, neighbors, FIB entries and a control ping; etcd keys; host links,
routes, nftables rules, conntrack; the window's ADD and DEL latencies; and the new pod reaches
every live pod. At the end, with N pods still live, the leak counts (what is left of deleted
pods), then every pod deleted and the counts again; VPP's log lines (testbed/vpplog, path from
--vpp-log or VSWITCH_TEST_VPP_LOG) and the agent's warnings and errors.

Stops after `--cycles` or `--minutes`, whichever comes first (the defaults: about 20 minutes in
all on a 2-core machine; `--minutes 1440` runs a day). The VPP dataplane runs when
VSWITCH_TEST_VPP_SOCKET names a VPP's API socket; it keeps to VRFs, names and an interconnect
subnet of its own (testbed/vpp), since other users share that VPP. The report replaces the soak
section of --out (BENCHMARKS.md, between its markers), its picture (soak.svg: RSS, fds
and latency over the cycles) goes to docs/benchmarks/ beside it; everything made is removed again,
also on failure or Ctrl-C. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.model.errors import CniError
from benchmarks.core import machine
from benchmarks.core.harness import (
    REPO,
    Namespaces,
    PodSubnets,
    agent_running,
    bench_agent_config,
    interrupt_on_signals,
    ours_network,
    plugin_bin_dir,
    remove_agent_links,
)
from benchmarks.core.plots import plot_dir
from benchmarks.core.sections import write_section
from benchmarks.soak.churn import Churn, Settings
from benchmarks.soak.report import BEGIN, END, DataplaneRun, plot, render
from testbed.etcd import EtcdServer
from testbed.libcni import DEFAULT_BUILD_DIR, build_driver
from testbed.vpp import API_DIR_ENV, SOCKET_ENV, ipam_keys, isolated_config, remove_base
from testbed.vpplog import LOG_ENV, VppLogTail, attribute

DEFAULT_OUT = REPO / "BENCHMARKS.md"


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run soak",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=50, help="live pods kept (default 50)")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="churn time per dataplane (default: 8, or 16 with one dataplane)")
    parser.add_argument("--cycles", type=int, default=0, help="stop after K cycles (0: no limit)")
    parser.add_argument("--window", type=int, default=50, help="cycles per sample (default 50)")
    parser.add_argument("--dataplane", choices=("kernel", "vpp", "both"), default="",
                        help="default: both when a VPP is reachable, else kernel")
    parser.add_argument("--vpp-log", default=os.environ.get(LOG_ENV, ""),
                        help=f"VPP's message log (default ${LOG_ENV})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="markdown file whose soak section is replaced (default BENCHMARKS.md)")
    parser.add_argument("--json", type=Path, help="also write every sample here")
    parser.add_argument("--seed", type=int, default=0, help="random choices (default: random)")
    args = parser.parse_args(argv)
    socket = os.environ.get(SOCKET_ENV, "")
    if not args.dataplane:
        args.dataplane = "both" if socket and os.path.exists(socket) else "kernel"
    if args.dataplane != "kernel" and not socket:
        parser.error(f"--dataplane {args.dataplane} needs {SOCKET_ENV} (a VPP's API socket)")
    if not args.minutes:
        args.minutes = 8.0 if args.dataplane == "both" else 16.0
    if args.pods < 2 or args.window < 1:
        parser.error("--pods must be at least 2 and --window at least 1")
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    args.seed = args.seed or secrets.randbelow(2**31)
    return args


def soak_one(name: str, args: argparse.Namespace, etcd_endpoints: list[str], tmp: Path,
             stack: ExitStack, subnets: PodSubnets, driver: Path, bin_dir: Path) -> DataplaneRun:
    """One dataplane's whole run: agent up, churn, leak counts, agent down, logs read."""
    tmp = tmp / name  # its own StateDir, sockets and logs
    tmp.mkdir()
    namespaces = Namespaces("vsk")
    stack.callback(namespaces.close)
    host_ns = namespaces.create()
    extra: dict[str, Any] = {}
    socket = os.environ.get(SOCKET_ENV, "")
    vrf = 2700 + os.getpid() % 16 * 2  # few distinct pairs: VPP keeps emptied VRF tables
    if name == "vpp":
        extra = isolated_config(socket, os.environ.get(API_DIR_ENV, ""), secrets.token_hex(2), vrf)
    config = bench_agent_config(tmp, etcd_endpoints, subnets.take(), extra)
    if name == "vpp":
        config["IPAMConfig"].update(ipam_keys(vrf))
    vpp_log = VppLogTail(args.vpp_log) if name == "vpp" and args.vpp_log else None
    settings = Settings(pods=args.pods, cycles=args.cycles, minutes=args.minutes,
                        window=args.window, seed=args.seed,
                        vpp_socket=socket if name == "vpp" else "")
    pod_network = ""
    try:
        with agent_running(tmp, config, f"soak-{name}") as agent:
            pod_network = str(agent.get("/contiv/v1/ipam")[1]["podNetwork"])
            net = ours_network(driver, bin_dir, tmp, host_ns, agent, f"soak-{name}")
            churn = Churn(name, settings, agent, net, namespaces, etcd_endpoints[0], log)
            try:
                result = churn.run()
            finally:
                churn.close()
    finally:
        if name == "vpp" and pod_network:
            try:
                remove_base(config, pod_network)  # VPP's interconnect before its veth
            except CniError as exc:  # VPP stopped answering: its objects stay with it
                log(f"vpp: VPP's interconnect not removed: {exc}")
        remove_agent_links(config)
    if vpp_log is not None:
        ours = churn.all_links() | {str(config.get("VPPHostPeerInterface", ""))}
        result.vpp_log = attribute(vpp_log.lines(), ours)
        result.vpp_log_path = str(vpp_log.path)
    result.agent_lines = [line for line in agent.log().splitlines()
                          if " WARNING " in line or " ERROR " in line or "Traceback" in line]
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    interrupt_on_signals()
    raw = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks run soak", *raw])
    header = {"command": command, "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "load_start": machine.loadavg(), "machine": machine.machine(),
              "commit": machine.git_commit(), "seed": str(args.seed),
              "vpp_log": args.vpp_log or "not read (no --vpp-log / VSWITCH_TEST_VPP_LOG)"}
    runs: list[DataplaneRun] = []
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-soak-{os.getpid()}-"))
    with ExitStack() as stack, EtcdServer() as etcd:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        log("building the libcni driver and the plugin")
        driver = build_driver(DEFAULT_BUILD_DIR)
        bin_dir = plugin_bin_dir(tmp)
        subnets = PodSubnets()
        for name in ("kernel", "vpp") if args.dataplane == "both" else (args.dataplane,):
            log(f"{name}: {args.pods} live pods, {args.minutes:g} min"
                f"{f' or {args.cycles} cycles' if args.cycles else ''}")
            runs.append(soak_one(name, args, etcd.endpoints, tmp, stack, subnets, driver,
                                 bin_dir))
    header["load_end"] = machine.loadavg()
    section = render(header, runs)
    write_section(args.out, section, BEGIN, END)
    plot(runs, plot_dir(args.out))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "runs": [r.to_json() for r in runs]},
                                        indent=1))
    log(f"wrote the soak section of {args.out}")
    return 0 if all(r.clean for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
