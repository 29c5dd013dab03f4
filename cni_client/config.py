"""What the runtime hands the plugin: CNI_* environment variables and the network config on stdin.

Validation follows CNI spec 1.1.0 and libcni's skel: which variables each verb requires, the
container ID and interface name rules, cniVersion support and the verbs each version allows.
Every problem becomes a PluginError with the spec's code that names the offending variable or
field: 4 for the environment, 6 for undecodable stdin, 7 for an invalid config, 1 for a version.
Our own config keys (agentSocket, timeoutSeconds, logFile, logLevel, logFormat) are typed and
defaulted here.
"""

from __future__ import annotations

import math
import os

from cni_client import jsonfast
from cni_client.errors import (
    DECODE_FAILURE,
    INCOMPATIBLE_VERSION,
    INVALID_CONFIG,
    INVALID_ENVIRONMENT,
    PluginError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST_VERSION = "1.1.0"
VERBS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
MAX_STDIN = 1 << 20
MAX_TIMEOUT = 3600.0  # seconds; also keeps socket timeouts within what the platform represents
MAX_SOCKET_PATH = 107  # bytes: sun_path holds 108, NUL included
DEFAULT_SOCKET = "/run/vswitch-cni/cni.sock"
DEFAULT_TIMEOUT = 30.0
DEFAULT_STATE_DIR = "/var/lib/vswitch-cni"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

# Variables each verb requires (libcni skel's table); the others are optional.
_REQUIRED = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME"),
}
# The oldest cniVersion that defines each verb.
_MIN_VERSION = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}
# [a-zA-Z0-9][a-zA-Z0-9_.\-]* without the re module (its import is ~3 ms of every exec)
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_REST = _NAME_FIRST | frozenset("_.-")


def _is_name(text: str) -> bool:
    return bool(text) and text[0] in _NAME_FIRST and all(c in _NAME_REST for c in text[1:])



class Invocation:
    """One validated plugin call."""

    __slots__ = ("args", "cni_path", "cni_version", "command", "config", "container_id",
                 "ifname", "log_file", "log_format", "log_level", "netns", "pod", "pod_uid",
                 "socket", "state_dir", "stdin", "timeout")

    def __init__(self, command: str, env: Mapping[str, str], stdin: str,
                 config: dict[str, object]) -> None:
        self.command = command
        self.container_id = env.get("CNI_CONTAINERID", "")
        self.netns = env.get("CNI_NETNS", "")
        self.ifname = env.get("CNI_IFNAME", "")
        self.args = env.get("CNI_ARGS", "")
        self.cni_path = env.get("CNI_PATH", "")
        pairs = parse_cni_args(self.args)
        self.pod_uid = pairs.get("K8S_POD_UID", "")
        name = pairs.get("K8S_POD_NAME", "")
        self.pod = f"{pairs.get('K8S_POD_NAMESPACE', '')}/{name}" if name else ""
        self.stdin = stdin
        self.config = config
        self.cni_version = str(config["cniVersion"])
        self.socket = str(config.get("agentSocket", DEFAULT_SOCKET))
        self.state_dir = str(config.get("stateDir", DEFAULT_STATE_DIR))
        timeout = config.get("timeoutSeconds", DEFAULT_TIMEOUT)
        self.timeout = float(timeout) if isinstance(timeout, int | float) else DEFAULT_TIMEOUT
        log_file = config.get("logFile")
        self.log_file = log_file if isinstance(log_file, str) else None
        self.log_level = str(config.get("logLevel", "info")).lower()
        self.log_format = str(config.get("logFormat", "text"))


def read_command(env: Mapping[str, str]) -> str:
    command = env.get("CNI_COMMAND", "")
    if not command:
        raise PluginError(INVALID_ENVIRONMENT, "required environment variable CNI_COMMAND is "
                          "missing")
    if command not in VERBS:
        raise PluginError(INVALID_ENVIRONMENT, f"CNI_COMMAND {command!r} is not a CNI verb",
                          f"expected one of {', '.join(VERBS)}")
    return command


def validate_env(command: str, env: Mapping[str, str]) -> None:
    required = _REQUIRED.get(command, ())
    missing = [name for name in required if not env.get(name)]
    if missing:
        raise PluginError(INVALID_ENVIRONMENT, f"required environment variable(s) "
                          f"{', '.join(missing)} missing for {command}")
    if "CNI_CONTAINERID" in required:
        container_id = env["CNI_CONTAINERID"]
        if not _is_name(container_id):
            raise PluginError(INVALID_ENVIRONMENT, "CNI_CONTAINERID has invalid characters",
                              f"{container_id!r}: must start with a letter or digit, then only "
                              "letters, digits, '_', '.' and '-'")
    if "CNI_IFNAME" in required:
        problem = ifname_problem(env["CNI_IFNAME"])
        if problem:
            raise PluginError(INVALID_ENVIRONMENT, f"CNI_IFNAME is invalid: {problem}",
                              repr(env["CNI_IFNAME"]))
    parse_cni_args(env.get("CNI_ARGS", ""))


def ifname_problem(name: str) -> str:
    """Why `name` is not a valid interface name (the kernel's rules), or ''."""
    if len(name.encode()) > 15:
        return "longer than 15 bytes"
    if name in (".", ".."):
        return "'.' and '..' are not interface names"
    if any(c in "/:" or c.isspace() for c in name):
        return "contains '/', ':' or whitespace"
    return ""


def parse_cni_args(args: str) -> dict[str, str]:
    """CNI_ARGS: 'KEY=VALUE;KEY=VALUE' (as libcni's LoadArgs parses it)."""
    out: dict[str, str] = {}
    for pair in args.split(";") if args else ():
        key, sep, value = pair.partition("=")
        if not sep or not key or "=" in value:
            raise PluginError(INVALID_ENVIRONMENT, "CNI_ARGS has an invalid pair",
                              f"{pair!r}: expected KEY=VALUE pairs separated by ';'")
        out[key] = value
    return out


def decode_stdin(raw: bytes) -> tuple[str, object]:
    if len(raw) > MAX_STDIN:
        raise PluginError(INVALID_CONFIG, "network config on stdin is larger than 1 MiB",
                          f"refusing to read more than {MAX_STDIN} bytes")
    try:
        text = raw.decode("utf-8")
        return text, jsonfast.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PluginError(DECODE_FAILURE, "cannot decode the network config on stdin as JSON",
                          str(exc)) from exc
    except RecursionError:  # json's decoder recurses once per nesting level
        raise PluginError(DECODE_FAILURE, "cannot decode the network config on stdin as JSON",
                          "nested too deeply") from None


def _check_version(config: dict[str, object], command: str) -> None:
    version = config.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise PluginError(INVALID_CONFIG, "network config field cniVersion is missing or not a "
                          "string")
    if version not in SUPPORTED_VERSIONS:
        raise PluginError(INCOMPATIBLE_VERSION, f"cniVersion {version!r} is not supported",
                          f"supported versions: {', '.join(SUPPORTED_VERSIONS)}")
    minimum = _MIN_VERSION.get(command)
    if minimum and SUPPORTED_VERSIONS.index(version) < SUPPORTED_VERSIONS.index(minimum):
        raise PluginError(INCOMPATIBLE_VERSION, f"config version {version} does not allow "
                          f"{command}", f"{command} needs cniVersion {minimum} or later")


def _field_error(field: str, problem: str) -> PluginError:
    return PluginError(INVALID_CONFIG, f"network config field {field} {problem}")


def validate_config(config: object, command: str) -> dict[str, object]:
    if not isinstance(config, dict):
        raise PluginError(INVALID_CONFIG, "network config must be a JSON object",
                          f"got {type(config).__name__}")
    _check_version(config, command)
    name = config.get("name")
    if not isinstance(name, str) or not name:
        raise _field_error("name", "is missing or not a string")
    if not _is_name(name):
        raise _field_error("name", f"{name!r} has invalid characters")
    if not isinstance(config.get("type"), str) or not config["type"]:
        raise _field_error("type", "is missing or not a string")
    _check_own_keys(config)
    for key in ("runtimeConfig", "prevResult"):
        if key in config and not isinstance(config[key], dict):
            raise _field_error(key, "must be an object")
    prev = config.get("prevResult")
    if isinstance(prev, dict):
        for key, kind, shape in (("interfaces", list, "a list"), ("ips", list, "a list"),
                                 ("routes", list, "a list"), ("dns", dict, "an object")):
            if key in prev and not isinstance(prev[key], kind):
                raise _field_error(f"prevResult.{key}", f"must be {shape}")
    if command == "GC":
        _check_attachments(config)
    return config


def _check_own_keys(config: dict[str, object]) -> None:
    socket = config.get("agentSocket", DEFAULT_SOCKET)
    if not isinstance(socket, str) or not socket or "\0" in socket:
        raise _field_error("agentSocket", "must be a non-empty path string")
    if len(socket.encode("utf-8", "surrogateescape")) > MAX_SOCKET_PATH:
        raise _field_error("agentSocket", f"is longer than {MAX_SOCKET_PATH} bytes (the unix "
                           "socket path limit)")
    state_dir = config.get("stateDir", DEFAULT_STATE_DIR)
    if not isinstance(state_dir, str) or not os.path.isabs(state_dir) or "\0" in state_dir:
        raise _field_error("stateDir", "must be an absolute path string")
    timeout = config.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if (not isinstance(timeout, int | float) or isinstance(timeout, bool)
            or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT):
        raise _field_error("timeoutSeconds", f"must be a number of seconds above 0 and at most "
                           f"{MAX_TIMEOUT:g}, got {timeout!r}")
    log_file = config.get("logFile")
    if log_file is not None and (not isinstance(log_file, str) or not log_file):
        raise _field_error("logFile", "must be a non-empty path string")
    level = config.get("logLevel", "info")
    if not isinstance(level, str) or level.lower() not in LOG_LEVELS:
        raise _field_error("logLevel", f"must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    fmt = config.get("logFormat", "text")
    if fmt not in LOG_FORMATS:
        raise _field_error("logFormat", f"must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")


def _check_attachments(config: dict[str, object]) -> None:
    for key in ("cni.dev/valid-attachments", "cni.dev/attachments"):
        items = config.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise _field_error(key, "must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not all(
                    isinstance(item.get(k), str) for k in ("containerID", "ifname")):
                raise _field_error(f"{key}[{i}]", "must be an object with string containerID "
                                   "and ifname")


def load(env: Mapping[str, str], raw_stdin: bytes) -> Invocation:
    """Validate env and stdin for one verb other than VERSION."""
    command = read_command(env)
    validate_env(command, env)
    text, config = decode_stdin(raw_stdin)
    return Invocation(command, env, text, validate_config(config, command))
