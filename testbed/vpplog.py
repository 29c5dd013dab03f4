"""VPP's log during a test or a benchmark: the lines it added, and whose doing each one was.

`VppLogTail(path)` remembers where the log ended when it was made; `lines()` returns every line
added since (a log that was truncated or replaced is read from its start). The path is VPP's own
log of messages (`vlib_log`): where VPP runs with `unix { nodaemon }` that is its redirected
stdout (on these machines /var/log/vpp/vpp.stdout); `unix { log }` names a file of CLI commands.
Tests take it from VSWITCH_TEST_VPP_LOG (`LOG_ENV`) and skip the log check without it.

`attribute(lines, names)` sorts the lines about AF_PACKET interfaces on the Linux interfaces
`names` (the pods' veth host ends a run made; other users share the VPP) by cause:

- `device_gone_first`: VPP polled a socket whose device had gone before VPP's interface was
  deleted (`af_packet_fd_error: Network is down`, the `netlink error -19` of setting a gone
  device's state, and the delete's `epoll_ctl() failed` that follows them for the same fd).
  The deleter's order was wrong, or the pod's namespace went before the DEL.
- `unbound_delete`: a delete of a name VPP has no AF_PACKET interface on (`Host interface ...
  does not exist`): a request VPP did not need.
- `vpp_own`: the one `epoll_ctl() failed ... errno 9` that VPP 26.06 logs for every AF_PACKET
  interface deleted in the right order: its af_packet_delete_if closes the socket before it
  removes it from its epoll set (src/plugins/af_packet/af_packet.c; vlib/file.c logs the EBADF,
  and clib_file_del closes the fd a second time). Nothing a client can avoid.

The fd-only lines are tied to an interface by the `epoll_ctl` line that names the same fd when
VPP deletes the interface. Lines about other names, and other error lines, are `other`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

LOG_ENV = "VSWITCH_TEST_VPP_LOG"
_EPOLL = re.compile(r"epoll_ctl\(\) failed on epfd \(\d+\), file '(?:host-)?(\S+) queue \d+' "
                    r"\(fd (\d+)\), errno (\d+)")
_FD_ERROR = re.compile(r"af_packet: fd (\d+) reason af_packet_fd_error")
_NETLINK = re.compile(r"af_packet_interface_admin_up_down.*netlink error")
_UNBOUND = re.compile(r"Host interface (\S+) does not exist")
_ERRORISH = re.compile(r"error|failed|fail |panic|assert|abort|does not exist", re.IGNORECASE)


class VppLogTail:
    """The lines VPP's log gains from now on."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = self._size()

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def lines(self) -> list[str]:
        """Every complete line added since the last call (or since the tail was made)."""
        size = self._size()
        if size < self._offset:  # truncated or replaced (VPP restarted with a new file)
            self._offset = 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line VPP is still writing waits for the next call
        self._offset += end
        return data[:end].decode(errors="replace").splitlines()


@dataclass
class Attribution:
    device_gone_first: list[str] = field(default_factory=list)
    unbound_delete: list[str] = field(default_factory=list)
    vpp_own: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # error lines not about `names`

    @property
    def caused_by_client(self) -> list[str]:
        """The lines a client of VPP (the agent, or the runtime's order) caused."""
        return self.device_gone_first + self.unbound_delete


def attribute(lines: list[str], names: set[str]) -> Attribution:
    """Sorts `lines` by cause for the Linux interfaces `names` (see the module docstring)."""
    out = Attribution()
    pending: dict[str, list[str]] = {}  # fd -> its fd-only lines, until a delete names it
    last_fd = ""
    for line in lines:
        if match := _FD_ERROR.search(line):
            last_fd = match.group(1)
            pending.setdefault(last_fd, []).append(line)
        elif _NETLINK.search(line) and last_fd:
            pending.setdefault(last_fd, []).append(line)
        elif match := _EPOLL.search(line):
            name, fd = match.group(1), match.group(2)
            earlier = pending.pop(fd, [])
            if name not in names:
                out.other += [*earlier, line]
            elif earlier:
                out.device_gone_first += [*earlier, line]
            else:
                out.vpp_own.append(line)
        elif match := _UNBOUND.search(line):
            (out.unbound_delete if match.group(1) in names else out.other).append(line)
        elif _ERRORISH.search(line):
            out.other.append(line)
    for leftover in pending.values():  # a device gone whose interface was never deleted
        out.other += leftover
    return out
