"""vswitchctl's command line and its agents' answers (issue 23, defect 5): one real agent with one
real pod (a namespace wired through the real plugin), real etcd, vswitchctl as a process.

Test plan:
- a malformed URL (`--etcd 'http://[::1'`, also after the command; `--agent` likewise) is bad
  usage: exit 2 and one line naming the option (was a ValueError traceback, exit 1);
- the global options work after the command as before it (`nodes -o json --etcd E`, as kubectl
  users type it; `node remove NAME --etcd E` nested two levels): same output as before the
  command (was refused: "unrecognized arguments");
- `pod NAME --agent URL` where URL answers 404 (a server that is no agent, an agent without the
  check endpoint, an agent that does not have the attachment etcd records on the node): exit 4
  and one line on stderr naming that URL, the record still shown (was exit 0, "check not run");
  the real agent's URL: exit 0, check ok.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from testbed.agent import AgentHandle, net_config, run_plugin, running_agent
from testbed.netns import named_netns

REPO = Path(__file__).resolve().parents[2]


def ctl(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vswitchctl", *argv], capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=120)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory,
          etcd_endpoints: list[str]) -> Iterator[AgentHandle]:
    with running_agent(tmp_path_factory.mktemp("ctl"), etcd_endpoints,
                       pod_subnet="10.236.0.0/16") as handle:
        yield handle


@pytest.fixture(scope="module")
def pod(agent: AgentHandle) -> Iterator[str]:
    """A wired pod's container ID."""
    container = f"ctl{secrets.token_hex(5)}"
    with named_netns("vctl") as netns:
        added = run_plugin("ADD", net_config(agent), container_id=container, netns=netns,
                           args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={container}")
        assert added.returncode == 0, added.stdout + added.stderr
        try:
            yield container
        finally:
            run_plugin("DEL", net_config(agent), container_id=container, netns=netns)


def etcd_of(agent: AgentHandle) -> list[str]:
    return ["--etcd", ",".join(agent.config["EtcdEndpoints"]),
            "--prefix", agent.config["EtcdPrefix"]]


@pytest.mark.parametrize("argv", [
    ["--etcd", "http://[::1", "pods"],
    ["pods", "--etcd", "http://[::1"],
    ["--etcd", "http://127.0.0.1:2379", "--agent", "http://[::1", "pods"],
    ["pods", "--etcd", "http://127.0.0.1:2379", "--agent", "ftp://host/"],
])
def test_a_malformed_url_is_bad_usage_in_one_line(argv: list[str]) -> None:
    out = ctl(*argv)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    option = argv[argv.index("--agent") if "--agent" in argv else argv.index("--etcd")]
    assert out.stderr.startswith(f"vswitchctl: {option} "), out.stderr


def published(agent: AgentHandle) -> list[dict[str, object]]:
    """`nodes -o json` once the agent's registry entry is there (it publishes in the
    background, after it reports ready)."""
    deadline = time.monotonic() + 30
    while True:
        out = ctl(*etcd_of(agent), "-o", "json", "nodes")
        assert out.returncode in (0, 4), out.stderr  # 4: the registry's agent address
        nodes: list[dict[str, object]] = json.loads(out.stdout)
        if (nodes and nodes[0]["registry"] is not None) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.2)


def test_global_options_after_the_command(agent: AgentHandle, pod: str) -> None:
    before = published(agent)
    after = ctl("nodes", "-o", "json", *etcd_of(agent))
    assert after.returncode in (0, 4), after.stderr
    stable = ("id", "name", "registry")
    assert [{k: n[k] for k in stable} for n in json.loads(after.stdout)] == [
        {k: n[k] for k in stable} for n in before]
    assert [n["name"] for n in before] == [agent.config["NodeName"]]

    pods = ctl("pods", "--output", "yaml", *etcd_of(agent))
    assert pods.returncode == 0, pods.stderr
    assert f"container_id: {pod}" in pods.stdout

    checked = ctl("pod", pod, *etcd_of(agent), "--agent", agent.rest_url, "-o", "json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)[0]["check"]["ok"] is True

    missing = ctl("node", "remove", "no-such-node", *etcd_of(agent))
    assert missing.returncode == 1 and "no-such-node" in missing.stderr, missing.stderr


class _NotFound(BaseHTTPRequestHandler):
    body = b""
    content_type = "text/html"

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(params=["not an agent", "no check endpoint", "another node's agent"])
def answers_404(request: pytest.FixtureRequest) -> Iterator[str]:
    body = {
        "not an agent": (b"<html>404 Not Found</html>", "text/html"),
        "no check endpoint": (b'{"error": "no such path \'/v1/pods/x/check\'"}',
                              "application/json"),
        "another node's agent": (b'{"error": "no attachment x/eth0 here"}',
                                 "application/json"),
    }[request.param]
    handler = type("Handler", (_NotFound,), {"body": body[0], "content_type": body[1]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_agent_answering_404_is_no_answer(agent: AgentHandle, pod: str,
                                             answers_404: str) -> None:
    out = ctl(*etcd_of(agent), "--agent", answers_404, "pod", pod)
    assert out.returncode == 4, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and answers_404 in lines[0], out.stderr
    assert pod in out.stdout and "not run" in out.stdout
