"""The verbs: forward ADD/DEL/CHECK/GC/STATUS to the agent and translate its answer.

This is the one place where gRPC outcomes become CNI errors:
- a reply message with `result` != 0 is the agent's CNI error, passed through as is (the agent
  sends it together with a non-OK gRPC status, which is what an old Contiv client looks at);
- a bare status: UNAVAILABLE/DEADLINE_EXCEEDED/CANCELLED -> 11 (try again later), others -> 999
  (an agent that stops while a call waits for a worker cancels it: nothing was done, a retry is
  right);
- permission denied on the socket -> 5 (I/O), with a message saying that retrying cannot help;
- an unreachable agent -> 11 for ADD/CHECK/GC, 50 (not ready) for STATUS; a DEL is journaled on
  the node's disk (cni_client/journal) and succeeds, so a pod never sticks in Terminating: the
  agent tears the attachment down and releases its addresses when it settles the journal. Only
  a DEL that cannot even be journaled fails (11), so the runtime retries it. A journaled DEL
  also parks the pod's interface in the node's namespace (cni_client/park), so that the runtime
  removing the pod's namespace does not destroy the link under VPP before the agent is back.
"""

from __future__ import annotations

import time

from cni_client import __version__, grpc_unix, jsonfast, protowire
from cni_client.errors import INTERNAL, IO_FAILURE, NOT_READY, TRY_AGAIN_LATER, PluginError
from cni_client.result import render

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cni_client.config import Invocation
    from cni_client.log import Log
    from cni_client.protowire import CNIReply, CNIRequest

METHODS = {
    "ADD": "/cni.RemoteCNI/Add",
    "DEL": "/cni.RemoteCNI/Delete",
    "CHECK": "/cni.RemoteCNI/Check",
    "GC": "/cni.RemoteCNI/GC",
    "STATUS": "/cni.RemoteCNI/Status",
}
_TRANSIENT = (grpc_unix.UNAVAILABLE, grpc_unix.DEADLINE_EXCEEDED, grpc_unix.CANCELLED)


def build_request(inv: Invocation, deadline: float, env: Mapping[str, str]) -> CNIRequest:
    runtime_config = inv.config.get("runtimeConfig")
    remaining_ms = int((deadline - time.monotonic()) * 1000)
    return {
        "version": inv.cni_version,
        "container_id": inv.container_id,
        "network_namespace": inv.netns,
        "interface_name": inv.ifname,
        "extra_nw_config": inv.stdin,
        "extra_arguments": inv.args,
        "runtime_config": jsonfast.dumps(runtime_config) if runtime_config is not None else "",
        "pod_uid": inv.pod_uid,
        "deadline_ms": min(max(remaining_ms, 1), 0xFFFFFFFF),
        "traceparent": env.get("TRACEPARENT", ""),
        "tracestate": env.get("TRACESTATE", ""),
        "cni_path": inv.cni_path,
    }


def run(inv: Invocation, env: Mapping[str, str], log: Log) -> dict[str, object] | None:
    """Execute one verb; the CNI result for ADD, None for the verbs that print nothing."""
    deadline = time.monotonic() + inv.timeout
    request = protowire.encode_cni_request(build_request(inv, deadline, env))
    log.debug(f"calling {METHODS[inv.command]} on {inv.socket} (timeout {inv.timeout:g}s)")
    call = grpc_unix.unary_call(inv.socket, METHODS[inv.command], request, deadline,
                                user_agent=f"vswitch-cni/{__version__}")
    reply = _decode_reply(call)
    if reply is not None and reply["result"] != 0:
        raise PluginError(reply["result"], reply["error"] or "agent reported a failure",
                          reply["error_details"])
    if call.status != grpc_unix.OK:
        if inv.command == "DEL" and reply is None and call.status in _TRANSIENT:
            _journal(inv, call.message, log)
            return None
        raise status_error(inv.command, call)
    if reply is None:
        raise PluginError(INTERNAL, "agent answered OK without a reply message")
    log.info(f"{inv.command} done")
    if inv.command != "ADD":
        return None
    prev = inv.config.get("prevResult")
    return render(reply, inv.cni_version, prev if isinstance(prev, dict) else None)


def _journal(inv: Invocation, why: str, log: Log) -> None:
    from cni_client.journal import journal_delete  # only a DEL the agent did not take

    try:
        path = journal_delete(inv.state_dir, inv.container_id, inv.ifname, inv.netns)
    except OSError as exc:
        raise PluginError(TRY_AGAIN_LATER, "vswitch agent is not reachable and the DEL could "
                          f"not be journaled in {inv.state_dir}", f"{why}; {exc}") from exc
    from cni_client.park import park  # the same: only on this path

    parked = park(inv.netns, inv.ifname, inv.container_id)
    log.warning(f"agent unreachable ({why}): DEL of {inv.container_id}/{inv.ifname} journaled "
                f"in {path}; {parked}; the agent settles it when it is back")


def _decode_reply(call: grpc_unix.CallResult) -> CNIReply | None:
    if call.payload is None:
        return None
    try:
        return protowire.decode_cni_reply(call.payload)
    except protowire.ProtoDecodeError as exc:
        raise PluginError(INTERNAL, "cannot decode the agent's reply", str(exc)) from exc


def status_error(command: str, call: grpc_unix.CallResult) -> PluginError:
    """The CNI error for a call that ended with a non-OK status and no CNI error of its own."""
    if call.status == grpc_unix.PERMISSION_DENIED and call.transport_error:
        # The socket is root's (mode 0600): a retry by the same caller fails the same way.
        return PluginError(IO_FAILURE, "cannot use the vswitch agent socket: permission denied; "
                           "retrying cannot help (the plugin must run as root)", call.message)
    if call.status in _TRANSIENT or call.transport_error:
        if command == "STATUS":
            return PluginError(NOT_READY, "vswitch agent is not reachable", call.message)
        return PluginError(TRY_AGAIN_LATER, "vswitch agent is not reachable; try again later",
                           call.message)
    return PluginError(INTERNAL, call.message or f"agent call failed with gRPC status "
                       f"{call.status}", f"gRPC status {call.status}")
