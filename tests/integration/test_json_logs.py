"""Structured logs: the agent with --log-format json and the plugin with logFormat json.

Test plan:
- an ADD of a pod (CNI_ARGS with its namespace and name) through the real plugin to an agent
  started with --log-format json: every line the agent wrote is a JSON object with time, level,
  logger and message; the ADD's lines carry container_id, ifname, pod and verb, and one line per
  ADD step carries its phase; a DEL's lines carry verb DEL.
- the plugin's log file (logFormat json): one object per line with the same field names.
- the text format (default) keeps the fields readable at the end of the line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from testbed.agent import net_config, run_plugin, running_agent

POD_ARGS = "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart-7"


def test_agent_and_plugin_json_logs(tmp_path: Path, etcd_endpoints: list[str],
                                    make_netns: Callable[[], str]) -> None:
    plugin_log = tmp_path / "plugin.log"
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.81.0.0/16",
                       args=["--log-format", "json"]) as agent:
        ns = make_netns()
        conf = net_config(agent, logFile=str(plugin_log), logLevel="debug", logFormat="json")
        added = run_plugin("ADD", conf, container_id="jlog1", netns=ns, args=POD_ARGS)
        assert added.returncode == 0, added.stdout
        deleted = run_plugin("DEL", conf, container_id="jlog1", netns=ns, args=POD_ARGS)
        assert deleted.returncode == 0, deleted.stdout
        text = agent.log()

    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert entries and all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    mine = [e for e in entries if e.get("container_id") == "jlog1"]
    adds = [e for e in mine if e.get("verb") == "ADD"]
    assert adds and all(e["pod"] == "shop/cart-7" and e["ifname"] == "eth0" for e in adds)
    phases = {e["phase"] for e in adds if "phase" in e}
    assert phases == {"allocate", "record", "wire", "podside", "commit"}
    assert any(e.get("verb") == "DEL" for e in mine)

    lines = [json.loads(line) for line in plugin_log.read_text().splitlines()]
    assert {e["verb"] for e in lines} == {"ADD", "DEL"}
    for entry in lines:
        assert entry["container_id"] == "jlog1" and entry["pod"] == "shop/cart-7"
        assert entry["logger"] == "vswitch-cni" and entry["level"] in ("DEBUG", "INFO")
        assert entry["time"].endswith("Z") and entry["message"]


def test_text_log_keeps_the_fields_at_the_end(tmp_path: Path, etcd_endpoints: list[str],
                                              make_netns: Callable[[], str]) -> None:
    with running_agent(tmp_path, etcd_endpoints, pod_subnet="10.82.0.0/16") as agent:
        ns = make_netns()
        added = run_plugin("ADD", net_config(agent), container_id="tlog1", netns=ns,
                           args=POD_ARGS)
        assert added.returncode == 0, added.stdout
        run_plugin("DEL", net_config(agent), container_id="tlog1", netns=ns)
        text = agent.log()
    wired = [line for line in text.splitlines() if "ADD phase wire done" in line]
    assert len(wired) == 1
    assert wired[0].endswith("[container_id=tlog1 ifname=eth0 pod=shop/cart-7 verb=ADD "
                             "phase=wire]")
