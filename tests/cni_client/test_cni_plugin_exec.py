"""The installed `vswitch-cni` executable, run as a runtime runs it, against a real grpcio agent.

Test plan (each case: subprocess with CNI_* env + config on stdin; we check the exit code and that
stdout holds exactly the result or the error object, nothing else):
- VERSION answered locally, echoing the caller's cniVersion;
- ADD in the exact shape of each cniVersion; the CNIRequest the agent receives; chaining on a
  prevResult (our interfaces appended, indices shifted);
- DEL, CHECK, STATUS, GC succeed silently; version gates (CHECK < 0.4.0, GC/STATUS < 1.1.0 -> 1);
- agent-side errors pass through with code, msg, details; bare statuses map to 11 / 999;
- unreachable agent: 11 for ADD/CHECK/GC, 50 for STATUS, DEL journaled on disk and success
  (11 when it cannot be journaled);
- bad input: each missing/invalid env var -> 4, undecodable stdin -> 6, invalid config -> 7 naming
  the field, unsupported cniVersion -> 1, oversized stdin.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from testbed import tools
from tests.cni_client.scripted_agent import ScriptedAgent, cni_error, status_only

VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CNI_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=uid-42"


CHECKOUT = str(Path(__file__).resolve().parents[2])  # the plugin runs this checkout's code


def plugin_path() -> str:
    try:
        return str(tools.plugin())
    except tools.NotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[bytes]) -> None:
        self.rc = proc.returncode
        self.stdout = proc.stdout.decode()
        self.stderr = proc.stderr.decode()

    def json(self) -> Any:
        assert self.stdout.endswith("\n") and self.stdout.count("\n") == 1, self.stdout
        return json.loads(self.stdout)


def run(command: str, conf: dict[str, Any] | str | bytes | None, drop: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None) -> Run:
    env = {"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": command,
           "CNI_CONTAINERID": "0123abcd", "CNI_NETNS": "/var/run/netns/pod", "CNI_IFNAME": "eth0",
           "CNI_ARGS": CNI_ARGS, "CNI_PATH": "/opt/cni/bin", "TRACEPARENT": "00-abc-def-01",
           "PYTHONPATH": CHECKOUT}
    env.update(extra_env or {})
    for name in drop:
        env.pop(name, None)
    stdin = conf if isinstance(conf, bytes) else (
        conf if isinstance(conf, str) else json.dumps(conf or {})).encode()
    proc = subprocess.run([plugin_path()], input=stdin, env=env, capture_output=True, timeout=60,
                          check=False)
    return Run(proc)


def conf(version: str = "1.1.0", socket: str = "/nonexistent/cni.sock", **extra: Any
         ) -> dict[str, Any]:
    return {"cniVersion": version, "name": "vswitch", "type": "vswitch-cni",
            "agentSocket": socket, **extra}


def assert_error(result: Run, code: int, *words: str) -> dict[str, Any]:
    assert result.rc != 0, (result.stdout, result.stderr)
    err = result.json()
    assert set(err) <= {"cniVersion", "code", "msg", "details"} and err["code"] == code, err
    text = f"{err['msg']} {err.get('details', '')}"
    assert all(w in text for w in words), err
    return dict(err)


# --- VERSION -------------------------------------------------------------------------------------
@pytest.mark.parametrize("stdin,echo", [('{"cniVersion": "0.4.0"}', "0.4.0"), ("", "1.1.0"),
                                        ("garbage", "1.1.0")])
def test_version_is_answered_locally(stdin: str, echo: str) -> None:
    result = run("VERSION", stdin, drop=("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"))
    assert result.rc == 0
    assert result.json() == {"cniVersion": echo, "supportedVersions": VERSIONS}


# --- ADD -----------------------------------------------------------------------------------------
def expected_add(version: str) -> dict[str, Any]:
    old = version in ("0.3.0", "0.3.1", "0.4.0")
    pod_if: dict[str, Any] = {"name": "eth0", "mac": "02:fe:00:00:00:02",
                              "sandbox": "/var/run/netns/pod"}
    if version == "1.1.0":
        pod_if["mtu"] = 1450
    ips: list[dict[str, Any]] = [
        {"interface": 1, "address": "10.1.1.5/32", "gateway": "10.1.1.1"},
        {"interface": 1, "address": "fd00::5/128"},
    ]
    if old:
        ips[0]["version"], ips[1]["version"] = "4", "6"
    return {
        "cniVersion": version,
        "interfaces": [{"name": "tap-1234", "mac": "02:fe:00:00:00:01"}, pod_if],
        "ips": ips,
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.1.1"}, {"dst": "::/0"}],
        "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local",
                "search": ["default.svc.cluster.local"], "options": ["ndots:5"]},
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_add_result_has_the_shape_of_each_version(agent: ScriptedAgent, version: str) -> None:
    result = run("ADD", conf(version, agent.socket_path))
    assert result.rc == 0, result.stderr
    assert result.json() == expected_add(version)


def test_add_sends_the_full_request(agent: ScriptedAgent) -> None:
    config = conf("1.0.0", agent.socket_path, timeoutSeconds=20,
                  runtimeConfig={"portMappings": [{"hostPort": 8080, "containerPort": 80}]})
    stdin = json.dumps(config, indent=1)  # must reach the agent byte for byte
    assert run("ADD", stdin, extra_env={"TRACESTATE": "vendor=1"}).rc == 0
    [(method, req)] = agent.servicer.requests
    assert method == "Add"
    assert (req.version, req.container_id, req.network_namespace, req.interface_name) == (
        "1.0.0", "0123abcd", "/var/run/netns/pod", "eth0")
    assert (req.extra_nw_config, req.extra_arguments, req.pod_uid) == (stdin, CNI_ARGS, "uid-42")
    assert json.loads(req.runtime_config) == config["runtimeConfig"]
    assert 0 < req.deadline_ms <= 20000
    assert (req.traceparent, req.tracestate, req.cni_path) == ("00-abc-def-01", "vendor=1",
                                                               "/opt/cni/bin")


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_add_chained_after_a_prev_result(agent: ScriptedAgent, version: str) -> None:
    old = version == "0.4.0"
    prev_ip: dict[str, Any] = {"address": "192.168.0.2/24", "interface": 1}
    if old:
        prev_ip["version"] = "4"
    prev = {"cniVersion": version, "interfaces": [{"name": "br0"}, {"name": "veth0"}],
            "ips": [prev_ip], "routes": [{"dst": "192.168.0.0/16"}],
            "dns": {"nameservers": ["8.8.8.8", "10.96.0.10"]}}
    result = run("ADD", conf(version, agent.socket_path, prevResult=prev))
    assert result.rc == 0, result.stderr
    out = result.json()
    ours = expected_add(version)
    assert out["interfaces"] == prev["interfaces"] + ours["interfaces"]
    assert out["ips"] == [prev_ip] + [{**ip, "interface": ip["interface"] + 2}
                                      for ip in ours["ips"]]
    assert out["routes"] == prev["routes"] + ours["routes"]
    assert out["dns"]["nameservers"] == ["8.8.8.8", "10.96.0.10"]


# --- DEL, CHECK, STATUS, GC ----------------------------------------------------------------------
@pytest.mark.parametrize("command,method,extra", [
    ("DEL", "Delete", {}),
    ("CHECK", "Check", {"prevResult": {"cniVersion": "1.1.0"}}),
    ("STATUS", "Status", {}),
    ("GC", "GC", {"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]}),
    ("GC", "GC", {"cni.dev/attachments": []}),
])
def test_other_verbs_succeed_silently(agent: ScriptedAgent, command: str, method: str,
                                      extra: dict[str, Any]) -> None:
    result = run(command, conf("1.1.0", agent.socket_path, **extra))
    assert (result.rc, result.stdout) == (0, ""), result.stderr
    assert [m for m, _ in agent.servicer.requests] == [method]


def test_del_without_netns_is_valid(agent: ScriptedAgent) -> None:
    result = run("DEL", conf("0.3.1", agent.socket_path), drop=("CNI_NETNS",))
    assert (result.rc, result.stdout) == (0, "")
    assert agent.servicer.requests[0][1].network_namespace == ""


@pytest.mark.parametrize("command,version", [("CHECK", "0.3.1"), ("STATUS", "1.0.0"),
                                             ("GC", "1.0.0"), ("CHECK", "0.3.0")])
def test_verbs_newer_than_the_config_version(command: str, version: str) -> None:
    assert_error(run(command, conf(version)), 1, command, version)


# --- agent-side failures -------------------------------------------------------------------------
@pytest.mark.parametrize("command,code,status", [
    ("ADD", 100, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ("CHECK", 3, grpc.StatusCode.NOT_FOUND),
    ("DEL", 11, grpc.StatusCode.UNAVAILABLE),     # DEL passes agent-side errors through
    ("STATUS", 51, grpc.StatusCode.UNAVAILABLE),
    ("GC", 101, grpc.StatusCode.INTERNAL),
])
def test_agent_errors_pass_through(agent: ScriptedAgent, command: str, code: int,
                                   status: grpc.StatusCode) -> None:
    method = {"ADD": "Add", "CHECK": "Check", "DEL": "Delete", "STATUS": "Status", "GC": "GC"}
    agent.servicer.handlers[method[command]] = cni_error(code, "it failed: ü", "why", status)
    err = assert_error(run(command, conf("1.1.0", agent.socket_path)), code)
    assert err == {"cniVersion": "1.1.0", "code": code, "msg": "it failed: ü", "details": "why"}


@pytest.mark.parametrize("status,code", [(grpc.StatusCode.UNAVAILABLE, 11),
                                         (grpc.StatusCode.DEADLINE_EXCEEDED, 11),
                                         (grpc.StatusCode.CANCELLED, 11),
                                         (grpc.StatusCode.INTERNAL, 999),
                                         (grpc.StatusCode.UNIMPLEMENTED, 999)])
def test_bare_status_from_the_agent(agent: ScriptedAgent, status: grpc.StatusCode,
                                    code: int) -> None:
    agent.servicer.handlers["Add"] = status_only(status, "boom at the agent")
    err = assert_error(run("ADD", conf("1.0.0", agent.socket_path)), code)
    assert err["cniVersion"] == "1.0.0"
    if code == 999:
        assert err["msg"] == "boom at the agent"


# --- unreachable agent ---------------------------------------------------------------------------
@pytest.mark.parametrize("command,code", [("ADD", 11), ("CHECK", 11), ("GC", 11),
                                          ("STATUS", 50)])
def test_agent_socket_missing(short_dir: str, command: str, code: int) -> None:
    socket = os.path.join(short_dir, "absent.sock")
    assert_error(run(command, conf("1.1.0", socket)), code, socket)


def test_hanging_agent_hits_timeout_seconds(agent: ScriptedAgent) -> None:
    agent.servicer.handlers["Add"] = agent.servicer.hang
    assert_error(run("ADD", conf("1.1.0", agent.socket_path, timeoutSeconds=0.5)), 11, "eadline")


@pytest.mark.parametrize("hang", [False, True])
def test_del_is_journaled_when_the_agent_is_unreachable(agent: ScriptedAgent, short_dir: str,
                                                        hang: bool) -> None:
    log_file = os.path.join(short_dir, "plugin.log")
    state_dir = os.path.join(short_dir, "state")
    socket = agent.socket_path if hang else os.path.join(short_dir, "absent.sock")
    agent.servicer.handlers["Delete"] = agent.servicer.hang
    result = run("DEL", conf("1.1.0", socket, timeoutSeconds=0.5, logFile=log_file,
                             stateDir=state_dir))
    assert (result.rc, result.stdout) == (0, "")
    assert "agent unreachable" in result.stderr and "journaled" in result.stderr
    assert "agent unreachable" in Path(log_file).read_text()
    entries = list(Path(state_dir, "pending-deletes").iterdir())
    assert [e.name for e in entries] == [
        hashlib.sha256(b"0123abcd\0eth0").hexdigest()[:32] + ".json"]
    assert json.loads(entries[0].read_text()) == {
        "container_id": "0123abcd", "ifname": "eth0", "netns": "/var/run/netns/pod",
        "detached": False, "record": None}


def test_del_that_cannot_be_journaled_asks_to_try_again(short_dir: str) -> None:
    blocker = os.path.join(short_dir, "file")
    Path(blocker).write_text("")
    result = run("DEL", conf("1.1.0", os.path.join(short_dir, "absent.sock"),
                             stateDir=os.path.join(blocker, "state")))
    assert_error(result, 11, "journaled")


# --- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("command,missing", [
    (c, v) for c in ("ADD", "CHECK") for v in ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME")
] + [("DEL", "CNI_CONTAINERID"), ("DEL", "CNI_IFNAME"), ("ADD", "CNI_COMMAND")])
def test_missing_env_var(command: str, missing: str) -> None:
    assert_error(run(command, conf("1.1.0"), drop=(missing,)), 4, missing)


@pytest.mark.parametrize("name,value", [
    ("CNI_COMMAND", "ATTACH"), ("CNI_CONTAINERID", "-abc"), ("CNI_CONTAINERID", "a b"),
    ("CNI_CONTAINERID", "a/b"), ("CNI_CONTAINERID", "ünï"), ("CNI_IFNAME", "a" * 16),
    ("CNI_IFNAME", "."), ("CNI_IFNAME", ".."), ("CNI_IFNAME", "a/b"), ("CNI_IFNAME", "a:b"),
    ("CNI_IFNAME", "a b"), ("CNI_IFNAME", "a\tb"), ("CNI_ARGS", "K8S_POD_UID"),
    ("CNI_ARGS", "A=1;=2"),
])
def test_invalid_env_var(name: str, value: str) -> None:
    assert_error(run("ADD", conf("1.1.0"), extra_env={name: value}), 4, name)


@pytest.mark.parametrize("stdin", [b"not json", b"\xff\xfe{}", b"", b'{"cniVersion": '])
def test_undecodable_stdin(stdin: bytes) -> None:
    assert_error(run("ADD", stdin), 6)


BASE = {"cniVersion": "1.1.0", "name": "vswitch", "type": "vswitch-cni"}


@pytest.mark.parametrize("config,field", [
    ([], "JSON object"),
    ({k: v for k, v in BASE.items() if k != "cniVersion"}, "cniVersion"),
    ({**BASE, "cniVersion": 1}, "cniVersion"),
    ({k: v for k, v in BASE.items() if k != "name"}, "name"),
    ({**BASE, "name": 5}, "name"), ({**BASE, "name": "bad name"}, "name"),
    ({k: v for k, v in BASE.items() if k != "type"}, "type"), ({**BASE, "type": 5}, "type"),
    ({**BASE, "agentSocket": 5}, "agentSocket"), ({**BASE, "agentSocket": ""}, "agentSocket"),
    ({**BASE, "timeoutSeconds": "30"}, "timeoutSeconds"),
    ({**BASE, "timeoutSeconds": -1}, "timeoutSeconds"),
    ({**BASE, "timeoutSeconds": True}, "timeoutSeconds"),
    ({**BASE, "logFile": 3}, "logFile"), ({**BASE, "logLevel": "loud"}, "logLevel"),
    ({**BASE, "runtimeConfig": []}, "runtimeConfig"), ({**BASE, "prevResult": "x"}, "prevResult"),
    ({**BASE, "prevResult": {"interfaces": {}}}, "prevResult.interfaces"),
])
def test_invalid_config(config: Any, field: str) -> None:
    assert_error(run("ADD", json.dumps(config)), 7, field)


def test_invalid_gc_attachments() -> None:
    config = {**BASE, "cni.dev/valid-attachments": [{"containerID": 1}]}
    assert_error(run("GC", config), 7, "cni.dev/valid-attachments[0]")


def test_unsupported_cni_version() -> None:
    err = assert_error(run("ADD", {**BASE, "cniVersion": "9.9.9"}), 1, "9.9.9", "1.1.0")
    assert err["cniVersion"] == "1.1.0"


def test_oversized_stdin() -> None:
    big = json.dumps({**BASE, "pad": "x" * (1 << 20)})
    assert_error(run("ADD", big), 7, "larger than 1 MiB")


# --- hostile input (issue 15) --------------------------------------------------------------------
def test_deeply_nested_stdin_is_a_decode_error_not_a_traceback() -> None:
    result = run("ADD", b"[" * 100_000 + b"]" * 100_000)
    assert_error(result, 6, "nested too deeply")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("timeout", ["1e300", "1e400", "3601"])
def test_huge_timeout_seconds_is_an_invalid_config(timeout: str) -> None:
    stdin = json.dumps(BASE)[:-1] + f', "timeoutSeconds": {timeout}}}'
    result = run("ADD", stdin)
    assert_error(result, 7, "timeoutSeconds")
    assert "Traceback" not in result.stderr


def test_agent_socket_over_the_unix_path_limit() -> None:
    assert_error(run("ADD", {**BASE, "agentSocket": "/" + "s" * 107}), 7, "agentSocket")


def test_permission_denied_on_the_socket_says_retrying_cannot_help(short_dir: str) -> None:
    path = os.path.join(short_dir, "root-only.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    try:
        os.chmod(path, 0)
        # as root, only without CAP_DAC_OVERRIDE does the socket's mode refuse us
        proc = subprocess.run(
            ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", plugin_path()],
            input=json.dumps({**BASE, "agentSocket": path}).encode(), capture_output=True,
            env={"PATH": os.environ.get("PATH", ""), "CNI_COMMAND": "ADD", "CNI_NETNS": "/x",
                 "CNI_CONTAINERID": "abc", "CNI_IFNAME": "eth0",
                 "PYTHONPATH": CHECKOUT},
            timeout=60, check=False)
    finally:
        listener.close()
    assert_error(Run(proc), 5, "permission denied", "retrying cannot help", path)
