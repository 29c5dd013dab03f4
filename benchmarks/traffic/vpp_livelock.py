"""Does a VPP stop answering when N AF_PACKET interfaces hold frames at once? (docs/vpp.md,
"A livelock of VPP's": VPP 26.06's vlib_file_poll asks epoll again for as long as it gets its
16 files, and an AF_PACKET socket stays readable until VPP's input node, which that loop never
reaches, empties its ring.)

    python -m benchmarks run vpp-livelock [--counts 15,16,17,40] [--modes interrupt,polling]
                                       [--out BENCHMARKS.md]

As root, with the environment tests/cluster uses for real VPPs (VSWITCH_TEST_VPP_START, _STOP,
_MESH_SOCKET, optional _API_DIR: testbed/vpp_nodes). Per trial (a count and a receive mode) a
VPP of its own in a namespace of its own, since a VPP caught in the livelock never comes out;
N veth pairs there, VPP's AF_PACKET interface on one end of each as the agent makes them
(agent/dataplane/vpp/afpacket, its default rings), up, in the mode. Then VPP is stopped
(SIGSTOP), one Ethernet frame is sent out of every pair's other end, so each ring holds one,
and VPP is continued (SIGCONT): answers VPP a control ping within 5 s, two seconds later? The
VPP is stopped (its stop command) and the namespace removed whatever happened. Writes its own
section of --out, between its markers (benchmarks.core.sections).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from agent.dataplane.vpp import afpacket, interfaces
from agent.dataplane.vpp.api import VppApi
from agent.model.errors import CniError
from benchmarks.core import machine
from benchmarks.core.sections import markers, write_section
from testbed import vpp_nodes
from testbed.netns import entered, named_netns, run_in, unique

BEGIN, END = markers("vpp-livelock")
COUNTS = "15,16,17,40"
FRAME = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x06" + bytes(46)  # a broadcast ARP


def trial(count: int, mode: str) -> dict[str, Any]:
    """One VPP, `count` interfaces in `mode`, each ring given a frame while VPP is stopped."""
    name = unique("vll")
    with named_netns("vll") as netns:
        run_in(netns, "ip", "link", "set", "lo", "up")
        start = subprocess.run([*shlex.split(vpp_nodes.START), name, os.path.basename(netns)],
                               capture_output=True, text=True, timeout=120, check=False)
        try:
            if start.returncode != 0:
                raise RuntimeError(f"starting VPP {name}: {start.stdout} {start.stderr}")
            return _wire_and_pause(netns, name, count, mode)
        finally:
            subprocess.run([*shlex.split(vpp_nodes.STOP), name], capture_output=True,
                           timeout=60, check=False)


def _wire_and_pause(netns: str, name: str, count: int, mode: str) -> dict[str, Any]:
    api = VppApi(vpp_nodes.SOCKET.replace("{name}", name), vpp_nodes.REAL_API_DIR or None,
                 5.0, 5.0, "vswitch-livelock")
    rings = afpacket.RingOptions(rx_mode=mode)
    try:
        version = str(api.call("show_version").version)
        for i in range(count):
            run_in(netns, "ip", "link", "add", f"vll{i}h", "type", "veth", "peer", "name",
                   f"vll{i}p")
            run_in(netns, "ip", "link", "set", f"vll{i}p", "up")
            run_in(netns, "ip", "link", "set", f"vll{i}h", "up")
            index = afpacket.create(api, f"vll{i}h", f"02:fe:00:00:{i // 256:02x}:{i % 256:02x}",
                                    rings)
            interfaces.set_admin_up(api, index)
        time.sleep(0.5)  # the new links' own first packets read
        pid = int(api.call("control_ping").vpe_pid)
        os.kill(pid, signal.SIGSTOP)
        try:
            with entered(netns):
                for i in range(count):
                    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
                        raw.bind((f"vll{i}p", 0))
                        raw.send(FRAME)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(2.0)
        try:
            api.call("control_ping")
            answers = True
        except CniError:
            answers = False
    finally:
        api.close()
    return {"count": count, "mode": mode, "answers": answers, "version": version}


def section(results: list[dict[str, Any]], command: str, load: tuple[str, str]) -> str:
    versions = sorted({r["version"] for r in results})
    lines = [
        BEGIN, "## VPP's AF_PACKET livelock (issue #27)", "",
        f"Command: `{command}` (as root). VPP: {', '.join(versions)}, started per trial by "
        f"the script `${vpp_nodes.START_ENV}` names. How: the module's docstring; why: "
        f"docs/vpp.md, \"A livelock of VPP's\". Load average {load[0]} at the start, "
        f"{load[1]} at the end.", "",
        "| AF_PACKET interfaces holding a frame | receive mode | VPP answers afterwards |",
        "| --- | --- | --- |"]
    lines += [f"| {r['count']} | {r['mode']} | {'yes' if r['answers'] else '**no**'} |"
              for r in results]
    return "\n".join([*lines, END, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--counts", default=COUNTS, help="interface counts to try")
    parser.add_argument("--modes", default="interrupt,polling", help="receive modes to try")
    parser.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it creates network namespaces and links")
    if not vpp_nodes.REAL_VPP:
        parser.error(vpp_nodes.MISSING)
    counts = [int(c) for c in args.counts.split(",")]
    modes = args.modes.split(",")
    before = machine.loadavg()
    results = []
    for mode in modes:
        for count in counts:
            results.append(trial(count, mode))
            print(f"{mode} {count}: VPP {'answers' if results[-1]['answers'] else 'is silent'}")
    command = "python -m benchmarks run vpp-livelock" + "".join(
        f" --{k} {v}" for k, v, d in (("counts", args.counts, COUNTS),
                                      ("modes", args.modes, "interrupt,polling")) if v != d)
    write_section(args.out, section(results, command, (before, machine.loadavg())), BEGIN, END)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
