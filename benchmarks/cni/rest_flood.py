"""A REST flood against a real agent while ADDs run through the real plugin (issue #23).

    python -m benchmarks run rest-flood [--before CHECKOUT] [--clients 500] [--slow 4000]
                                    [--adds 8] [--seconds 40] [--warmup 5] [--quick]
                                    [--json FILE]

Three scenarios, each on a fresh agent (kernel dataplane, INFO logging, default REST limits) and
one private etcd, all on loopback and in namespaces made here:

- idle: ADDs one after another, nothing else;
- clients: `--clients` clients looping on GET /metrics, each on a kept-alive connection (a new
  one when the agent closes or refuses it), in 4 processes, for `--seconds`;
- slow: `--slow` connections that send a request line and then one header byte every 2 s,
  never the blank line (slowloris), for `--seconds`; a connection the agent closes is opened
  again (at most 1000 a second).
Under load the ADDs start after `--warmup` seconds and are spread evenly over the rest.

Measured per scenario: ADD success (the plugin's exit status) and wall time, the agent's threads
and VmRSS (peak, sampled every 0.2 s) and CPU (its share of one core over the scenario), the
REST requests answered and refused or failed, and etcd's Range RPCs a second (etcd's own
/metrics: what the agent's reads cost etcd; a scrape that pinged etcd is one each).

`--before CHECKOUT` runs the same scenarios on the agent of another checkout (e.g. a worktree of
the commit before the fix) and prints both side by side. The plugin is this checkout's in both
(it is not what changed). The descriptor limit is raised to the hard limit first (the agent
inherits it). Needs root (namespaces, links). Nothing is asserted: the report prints figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.cni.rest_load import load
from benchmarks.core.harness import REPO, Namespaces, PodSubnets, bench_agent_config
from testbed.agent import AgentHandle, net_config, run_plugin, stop_process
from testbed.etcd import EtcdServer


@dataclass
class Figures:
    scenario: str
    adds: int = 0
    adds_ok: int = 0
    add_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    threads_before: int = 0
    threads_peak: int = 0
    rss_before_mib: float = 0.0
    rss_peak_mib: float = 0.0
    cpu_percent: float = 0.0
    seconds: float = 0.0
    answered: int = 0
    failed: int = 0
    etcd_range_per_s: float = 0.0


# ---- the agent and what it costs -----------------------------------------------------------


def launch(tmp: Path, checkout: Path, config: dict[str, Any]) -> AgentHandle:
    """`vswitch-agent` of `checkout` (its cwd: `-m agent.main` imports that checkout's code)."""
    config_path = tmp / "agent.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp / "agent.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "agent.main", "--config", str(config_path)],
            stdout=log, stderr=subprocess.STDOUT, cwd=checkout)
    return AgentHandle(process=process, socket=Path(config["CNISocket"]),
                       config_path=config_path, rest_url=f"http://{config['HTTPAddress']}",
                       log_path=log_path, gateway_ifname=config["GatewayInterface"],
                       config=config)


def proc_figures(pid: int) -> tuple[int, float, float]:
    """(threads, VmRSS MiB, CPU seconds) of a process."""
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return int(status["Threads"]), int(status["VmRSS"].split()[0]) / 1024, cpu


@contextmanager
def sampled(pid: int, fig: Figures) -> Iterator[None]:
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError, KeyError):
                threads, rss, _ = proc_figures(pid)
                fig.threads_peak = max(fig.threads_peak, threads)
                fig.rss_peak_mib = max(fig.rss_peak_mib, rss)
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()


def etcd_ranges(endpoint: str) -> float:
    """etcd's count of Range RPCs it has answered (its own /metrics)."""
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("grpc_server_handled_total{") and 'grpc_method="Range"' in line)


def wait_ready(agent: AgentHandle, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"agent exited:\n{agent.log()[-3000:]}")
        with contextlib.suppress(OSError):
            if agent.get("/readiness")[0] == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"agent not ready after {timeout:.0f} s:\n{agent.log()[-3000:]}")


def run_adds(agent: AgentHandle, namespaces: Namespaces, n: int, fig: Figures,
             until: float) -> list[tuple[str, Path]]:
    """n ADDs, spread evenly until the monotonic time `until` (one after another if past)."""
    added = []
    for i in range(n):
        time.sleep(max(0.0, (until - time.monotonic()) / (n - i) if i else 0.0))
        cid = secrets.token_hex(8)
        netns = namespaces.create()
        start = time.perf_counter()
        out = run_plugin("ADD", net_config(agent, timeoutSeconds=30), container_id=cid,
                         netns=str(netns))
        fig.add_ms.append((time.perf_counter() - start) * 1000)
        fig.adds += 1
        if out.returncode == 0:
            fig.adds_ok += 1
            added.append((cid, netns))
        else:
            fig.errors.append(out.stdout.strip()[:200])
    return added


def scenario(kind: str, checkout: Path, etcd: EtcdServer, namespaces: Namespaces,
             size: int, adds: int, warmup: float, seconds: float) -> Figures:
    fig = Figures(kind)
    tmp = Path(tempfile.mkdtemp(prefix=f"vcni-restflood-{os.getpid()}-"))
    config = bench_agent_config(tmp, etcd.endpoints, PodSubnets().take())
    agent = launch(tmp, checkout, config)
    added: list[tuple[str, Path]] = []
    try:
        wait_ready(agent)
        pid = agent.process.pid
        fig.threads_before, fig.rss_before_mib, cpu_before = proc_figures(pid)
        host, port = config["HTTPAddress"].rsplit(":", 1)
        ranges_before, started = etcd_ranges(etcd.endpoints[0]), time.monotonic()
        with sampled(pid, fig), load(kind, (host, int(port)), size) as counts:
            if kind == "idle":
                added = run_adds(agent, namespaces, adds, fig, 0.0)
            else:
                time.sleep(warmup)
                added = run_adds(agent, namespaces, adds, fig, started + seconds)
        fig.seconds = time.monotonic() - started
        fig.answered, fig.failed = int(counts[0]), int(counts[1])
        fig.etcd_range_per_s = (etcd_ranges(etcd.endpoints[0]) - ranges_before) / fig.seconds
        _, _, cpu_after = proc_figures(pid)
        fig.cpu_percent = 100 * (cpu_after - cpu_before) / fig.seconds
        for cid, netns in added:  # quiet now: DELs are not measured
            run_plugin("DEL", net_config(agent, timeoutSeconds=60), container_id=cid,
                       netns=str(netns))
    finally:
        stop_process(agent.process)
        subprocess.run(["ip", "link", "del", config["GatewayInterface"]], capture_output=True,
                       check=False)
        for _, netns in added:
            namespaces.remove(netns)
        shutil.rmtree(tmp, ignore_errors=True)
    return fig


def run(checkout: Path, clients: int, slow: int, adds: int, warmup: float,
        seconds: float) -> list[Figures]:
    namespaces = Namespaces("vrf")
    try:
        with EtcdServer() as etcd:
            return [scenario(kind, checkout, etcd, namespaces, size, adds, warmup, seconds)
                    for kind, size in (("idle", 0), ("clients", clients), ("slow", slow))]
    finally:
        namespaces.close()


# ---- the report ----------------------------------------------------------------------------


def _ms(values: list[float], pick: Callable[[list[float]], float]) -> str:
    return f"{pick(values):.0f}" if values else "-"


def render(results: dict[str, list[Figures]], clients: int, slow: int) -> str:
    load_text = {"idle": "none", "clients": f"{clients} clients looping GET /metrics",
                 "slow": f"{slow} slow connections"}
    lines = ["| agent | load | ADDs ok | ADD median ms | ADD max ms | agent threads (before -> "
             "peak) | agent RSS MiB (before -> peak) | agent CPU % | REST answered / failed | "
             "etcd Range/s |", "|" + "---|" * 10]
    for label, figures in results.items():
        for f in figures:
            answered = (f"{f.answered} / {f.failed} connections failed or closed"
                        if f.scenario == "clients" else
                        f"{f.answered} slow connections opened / {f.failed} closed by the agent"
                        if f.scenario == "slow" else "-")
            lines.append(
                f"| {label} | {load_text[f.scenario]} | {f.adds_ok}/{f.adds} | "
                f"{_ms(f.add_ms, statistics.median)} | {_ms(f.add_ms, max)} | "
                f"{f.threads_before} -> {f.threads_peak} | "
                f"{f.rss_before_mib:.0f} -> {f.rss_peak_mib:.0f} | {f.cpu_percent:.0f} | "
                f"{answered} | {f.etcd_range_per_s:.0f} |")
    errors = [f"- {label} {f.scenario}: {e}" for label, figs in results.items() for f in figs
              for e in f.errors[:3]]
    return "\n".join(lines + (["", "ADD errors (first 3 per scenario):", *errors]
                              if errors else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run rest-flood",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path,
                        help="another checkout whose agent to measure too (e.g. the old code)")
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--slow", type=int, default=4000)
    parser.add_argument("--adds", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of load before the first ADD")
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="seconds each load lasts; the ADDs are spread over it")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes (40 clients, 200 slow, 2 ADDs, 3 s of load)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    if args.quick:
        args.clients, args.slow, args.adds, args.warmup, args.seconds = 40, 200, 2, 1.0, 3.0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.slow + args.clients + 1024
    if hard != resource.RLIM_INFINITY and hard < need:
        parser.error(f"the descriptor limit ({hard}) is below the {need} the load needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the agent inherits it
    results: dict[str, list[Figures]] = {}
    if args.before is not None:
        results["before"] = run(args.before.resolve(), args.clients, args.slow, args.adds,
                                args.warmup, args.seconds)
    results["this"] = run(REPO, args.clients, args.slow, args.adds, args.warmup, args.seconds)
    print(render(results, args.clients, args.slow))
    if args.json:
        args.json.write_text(json.dumps({k: [asdict(f) for f in v] for k, v in results.items()},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
