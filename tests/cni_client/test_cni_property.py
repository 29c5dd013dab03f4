"""Property: whatever JSON and environment the runtime hands the plugin, it answers like a plugin.

The plugin's entry point (`cni_client.main.main`) runs in-process with hypothesis-made CNI_*
variables and stdin (arbitrary bytes, arbitrary JSON, configs that are nearly valid, deeply
nested documents). Every run must end in one of two ways, never with a traceback:
- exit 0 with stdout empty (DEL journaled, the agent being absent) or holding the VERSION result;
- exit 1 with exactly one CNI error object on stdout whose code is one the spec defines for
  what the plugin can know alone (1-7, 11, 50, 51), never 999.

No agent listens: `agentSocket` is forced to an absent socket and `stateDir`/`logFile` into a
temp directory, so a generated config can neither reach a real agent nor write outside the test.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cni_client import main as plugin_main

PLUGIN_CODES = {1, 2, 3, 4, 5, 6, 7, 11, 50, 51}
VERBS = ["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"]
VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
# environment values cannot hold NUL; surrogates are what os.environ makes of undecodable bytes
env_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"),
                   max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=16,
)
OWN_KEYS = ["prevResult", "runtimeConfig", "timeoutSeconds", "logLevel", "args", "ipam", "dns",
            "cni.dev/valid-attachments", "cni.dev/attachments", "capabilities", "mtu"]
near_valid = st.fixed_dictionaries(
    {"cniVersion": st.sampled_from(VERSIONS) | json_values,
     "name": st.sampled_from(["vswitch", "a.b-c_d"]) | json_values,
     "type": st.just("vswitch-cni") | json_values},
    optional={key: json_values for key in OWN_KEYS},
)


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


stdins = st.one_of(
    st.binary(max_size=200),
    json_values,
    near_valid,
    st.integers(10, 200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(10, 200_000).map(_nested),
)
envs = st.fixed_dictionaries(
    {"CNI_COMMAND": st.sampled_from(VERBS) | env_text},
    optional={"CNI_CONTAINERID": st.sampled_from(["abc123", "a" * 300]) | env_text,
              "CNI_NETNS": st.sampled_from(["/var/run/netns/x", "/proc/self/ns/net"]) | env_text,
              "CNI_IFNAME": st.sampled_from(["eth0", "x" * 16]) | env_text,
              "CNI_ARGS": st.sampled_from(["K8S_POD_UID=u;IgnoreUnknown=1"]) | env_text,
              "CNI_PATH": env_text},
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="vcni-prop-")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _confine(config: dict[str, Any], sandbox: str) -> bytes:
    """No generated path may name a real agent's socket or a file outside the sandbox."""
    config = dict(config)
    config["agentSocket"] = os.path.join(sandbox, "absent.sock")
    config["stateDir"] = os.path.join(sandbox, "state")
    config["logFile"] = os.path.join(sandbox, "plugin.log")
    return json.dumps(config).encode()


def run_main(env: dict[str, str], raw: bytes) -> tuple[int, str, str]:
    """The plugin's main() with this environment and stdin; (exit code, stdout, stderr)."""
    stdin = io.TextIOWrapper(io.BytesIO(raw))
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), \
            mock.patch.object(sys, "stdin", stdin), mock.patch.object(sys, "stdout", out), \
            mock.patch.object(sys, "stderr", err):
        code = plugin_main.main()
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(env=envs, stdin=stdins)
def test_every_input_gets_a_cni_answer(sandbox: str, env: dict[str, str],
                                       stdin: object) -> None:
    if isinstance(stdin, bytes):
        raw = stdin
    else:
        raw = _confine(stdin, sandbox) if isinstance(stdin, dict) else json.dumps(stdin).encode()
    code, out, err = run_main(env, raw)
    assert "Traceback" not in err, err
    if code == 0:
        if out:  # only VERSION prints on success here (no agent answers an ADD)
            assert env["CNI_COMMAND"] == "VERSION"
            assert set(json.loads(out)) == {"cniVersion", "supportedVersions"}
        return
    assert code == 1
    assert out.endswith("\n") and out.count("\n") == 1, out
    error = json.loads(out)
    assert set(error) <= {"cniVersion", "code", "msg", "details"}, error
    assert error["code"] in PLUGIN_CODES, error
    assert error["cniVersion"] in VERSIONS and isinstance(error["msg"], str) and error["msg"]
