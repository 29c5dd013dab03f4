"""What one CNI ADD runs (issue #22): the project's modules whose code runs during one kernel
ADD, how often the pod's network namespace is opened and entered, and the in-process ADD time.

    python -m benchmarks run add-path [--runs 30] [--out BENCHMARKS.md]

As root. A real etcd (testbed.etcd) on free ports, the kernel dataplane in a node namespace this
thread enters, the agent's PodManager and its gRPC service; the service's Add handler is called
directly, without the transport (the plugin's exec and the gRPC round trip are figure 1's and
3's), for a pod namespace made for each ADD and removed with it. Three ADD+DEL rounds warm up
(lazy imports, caches, the etcd connection); the fourth ADD is traced with `sys.setprofile`:
every Python function call names its file, and the files name the modules. C functions do not
count, nor do modules only imported, nor dataclasses' generated methods. The netns counts:
`os.open` of the pod's netns path, and calls of agent/linux/netns's `_setns`. Then `--runs`
untraced ADDs (each followed by its DEL) give the time. Writes its own section of --out,
between its markers (benchmarks.core.sections).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks.core import machine
from benchmarks.core.sections import markers, write_section

BEGIN, END = markers("add-path")
OURS = ("agent", "ipam", "policy", "protos")


@dataclass
class Trace:
    """One traced ADD: the modules that ran code, the netns opens and entries, the calls."""

    modules: set[str] = field(default_factory=set)
    netns_opened: int = 0
    netns_entered: int = 0
    calls: int = 0

    def ours(self) -> list[str]:
        return sorted(m for m in self.modules if m.split(".")[0] in OURS)

    def others(self) -> list[str]:
        return sorted(m for m in self.modules if m.split(".")[0] not in OURS)


def wings(modules: list[str]) -> dict[str, list[str]]:
    """The project's modules by wing: agent.<wing> for the agent's, else the package."""
    out: dict[str, list[str]] = {}
    for name in modules:
        parts = name.split(".")
        wing = ".".join(parts[:2]) if parts[0] == "agent" and len(parts) > 1 else parts[0]
        out.setdefault(wing, []).append(name)
    return out


class _Context:
    """The least of a grpc.ServicerContext the service uses; a failed ADD raises."""

    code: Any = None

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        raise RuntimeError(f"ADD failed: {self.code} {details}")

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass


def _request(netns: str, container_id: str) -> Any:
    from protos import cni_pb2

    config = json.dumps({"cniVersion": "1.1.0", "name": "bench", "type": "vswitch-cni"})
    return cni_pb2.CNIRequest(
        version="1.1.0", container_id=container_id, network_namespace=netns,
        interface_name="eth0", extra_nw_config=config,
        extra_arguments=f"K8S_POD_NAMESPACE=bench;K8S_POD_NAME={container_id}")


@contextmanager
def _service() -> Iterator[Any]:
    """The agent's CNI service over a kernel driver and a real etcd, in a node namespace."""
    from agent.api.grpc_server import CniService
    from agent.dataplane.kernel import KernelDataplane
    from agent.lifecycle.pods import PodManager
    from agent.state.store import Store
    from ipam import IPAMConfig, NodeAllocator, node_networks
    from testbed.etcd import EtcdServer
    from testbed.netns import entered, named_netns, run_in

    cfg, _ = IPAMConfig.from_mapping({"PodSubnetCIDR": "10.231.0.0/16"})
    networks = node_networks(cfg, 1)
    prefix = networks.pod_subnets[0].prefixlen
    gateways = [ipaddress.ip_interface(f"{networks.gateways[0]}/{prefix}")]
    suffix = secrets.token_hex(3)
    with ExitStack() as stack:
        node = stack.enter_context(named_netns("addpn"))
        run_in(node, "ip", "link", "set", "lo", "up")
        stack.enter_context(entered(node))
        etcd = stack.enter_context(EtcdServer())  # started from the node namespace: in it
        store = Store(etcd.endpoints, f"/add-path-{suffix}/", timeout=5.0)
        stack.callback(store.close)
        driver = KernelDataplane(gateways, 1400, f"vsb{suffix}", f"b{suffix[:3]}")
        driver.start()
        stack.callback(driver.close)
        pods = PodManager(1, store, driver, NodeAllocator(networks), 1400)
        yield CniService(pods, lambda: None)


def _add(service: Any, trace: Trace | None) -> float:
    """One ADD (traced into `trace` when given) and its DEL; the ADD's seconds."""
    from testbed.netns import named_netns

    with named_netns("addpp") as netns:
        container_id = "c" + secrets.token_hex(8)
        real_open = os.open

        def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
            if trace is not None and path == netns:
                trace.netns_opened += 1
            return real_open(path, *args, **kwargs)

        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call" and trace is not None:
                trace.modules.add(frame.f_code.co_filename)
                trace.calls += 1
                if frame.f_code.co_name == "_setns":
                    trace.netns_entered += 1

        if trace is not None:
            os.open = counting_open
            sys.setprofile(hook)
        start = time.perf_counter()
        try:
            reply = service.Add(_request(netns, container_id), _Context())
        finally:
            elapsed = time.perf_counter() - start
            sys.setprofile(None)
            os.open = real_open
        if reply.result != 0:
            raise RuntimeError(f"ADD answered {reply.result}: {reply.error_message}")
        service.Delete(_request(netns, container_id), _Context())
    return elapsed


def _module_names(files: set[str]) -> set[str]:
    """Files -> module names (frozen modules by their name; code without a file, not at all)."""
    by_file = {getattr(m, "__file__", None): name for name, m in list(sys.modules.items())}
    out = set()
    for path in files:
        if path.startswith("<frozen "):
            out.add(path[len("<frozen "):-1])
        elif path in by_file and path != __file__:
            out.add(by_file[path])
    return out


def measure(runs: int) -> dict[str, Any]:
    with _service() as service:
        for _ in range(3):
            _add(service, None)
        trace = Trace()
        _add(service, trace)
        trace.modules = _module_names(trace.modules)
        times = sorted(_add(service, None) * 1000 for _ in range(runs))
    return {"ours": trace.ours(), "others": trace.others(), "opened": trace.netns_opened,
            "entered": trace.netns_entered, "calls": trace.calls,
            "median_ms": statistics.median(times), "min_ms": times[0], "max_ms": times[-1],
            "runs": runs}


def section(f: dict[str, Any], command: str, load: tuple[str, str]) -> str:
    ours = f["ours"]
    lines = [
        BEGIN, "## What one ADD runs (issue #22)", "",
        f"Command: `{command}` (as root). One in-process kernel-dataplane ADD through the "
        "agent's gRPC service without the transport, real etcd, traced with `sys.setprofile` "
        "(how: the module's docstring). Load average "
        f"{load[0]} at the start, {load[1]} at the end.", "",
        f"- modules whose code ran: **{len(ours)} of the project's** "
        f"({len(ours) + len(f['others'])} with the standard library's and the dependencies'); "
        f"{f['calls']} Python calls;",
        f"- the pod's network namespace: opened {f['opened']} time(s), entered "
        f"{f['entered']} time(s);",
        f"- in-process ADD over {f['runs']} runs: median {f['median_ms']:.2f} ms "
        f"(min {f['min_ms']:.2f}, max {f['max_ms']:.2f}).", "",
        "| wing | modules | which |", "| --- | --- | --- |"]
    for wing, names in sorted(wings(ours).items()):
        which = ", ".join("__init__" if n == wing else n[len(wing) + 1:] for n in names)
        lines.append(f"| {wing} | {len(names)} | {which} |")
    others = Counter(m.split(".")[0] for m in f["others"])
    lines += ["", "Outside the project: " + ", ".join(
        f"{name} ({count})" for name, count in sorted(others.items())) + ".", END, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="untraced ADDs timed")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    before = machine.loadavg()
    figures = measure(args.runs)
    command = "python -m benchmarks run add-path" + \
        (f" --runs {args.runs}" if args.runs != 30 else "")
    write_section(args.out, section(figures, command, (before, machine.loadavg())), BEGIN, END)
    print(f"{len(figures['ours'])} project modules; netns opened {figures['opened']}, entered "
          f"{figures['entered']}; ADD median {figures['median_ms']:.2f} ms; wrote {args.out}")


if __name__ == "__main__":
    main()
