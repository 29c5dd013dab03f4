"""Entry point of the `vswitch-cni` executable (console script `cni_client.main:main`).

The CNI execution protocol: the verb and its arguments in CNI_* variables, the network config on
stdin; the result (ADD, VERSION) or the spec's error object on stdout, nothing else there; exit 0 on
success and 1 on error. Whatever goes wrong, even a bug, ends as an error object, never as a
traceback on stdout (tracebacks go to stderr for the runtime's logs).
"""

from __future__ import annotations

import os
import sys

from cni_client import config, jsonfast
from cni_client.errors import INTERNAL, IO_FAILURE, PluginError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import BinaryIO


def read_stdin(stream: BinaryIO) -> bytes:
    """Up to one byte more than the limit (so oversize is detected without reading it all)."""
    if stream.isatty():  # a person running VERSION by hand: do not wait for input
        return b""
    try:
        return stream.read(config.MAX_STDIN + 1)
    except OSError as exc:
        raise PluginError(IO_FAILURE, "cannot read the network config from stdin",
                          str(exc)) from exc


def version_info(raw: bytes) -> dict[str, object]:
    """VERSION: answered locally; echoes the caller's cniVersion as the spec asks."""
    version: object = None
    try:
        parsed = jsonfast.loads_bytes(raw) if raw.strip() else None
        version = parsed.get("cniVersion") if isinstance(parsed, dict) else None
    except (ValueError, RecursionError):
        pass  # libcni's skel ignores VERSION's stdin; so do we, if it is not usable
    return {
        "cniVersion": version if isinstance(version, str) and version else config.LATEST_VERSION,
        "supportedVersions": list(config.SUPPORTED_VERSIONS),
    }


def error_version(raw: bytes) -> str:
    """The cniVersion to put in an error object: the config's, if it is one we speak."""
    try:
        parsed = jsonfast.loads_bytes(raw)
    except (ValueError, RecursionError):
        return config.LATEST_VERSION
    version = parsed.get("cniVersion") if isinstance(parsed, dict) else None
    return version if version in config.SUPPORTED_VERSIONS else config.LATEST_VERSION


def execute(env: Mapping[str, str], raw: bytes) -> dict[str, object] | None:
    command = config.read_command(env)
    if command == "VERSION":
        return version_info(raw)
    inv = config.load(env, raw)
    from cni_client.log import Log  # only the forwarding verbs need these
    from cni_client.plugin import run

    log = Log(inv.log_file, inv.log_level, f"{command} {inv.container_id}/{inv.ifname}".strip(),
              inv.log_format, {"verb": command, "container_id": inv.container_id,
                               "ifname": inv.ifname, "pod": inv.pod})
    try:
        return run(inv, env, log)
    except PluginError as err:
        log.error(f"failed with code {err.code}: {err.msg} {err.details}".rstrip())
        raise


def _emit(obj: dict[str, object]) -> None:
    sys.stdout.write(jsonfast.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    env = os.environ
    raw = b""
    try:
        raw = read_stdin(sys.stdin.buffer)
        out = execute(env, raw)
    except PluginError as err:
        _emit(err.to_json(error_version(raw)))
        return 1
    except Exception as exc:  # a bug; the runtime still gets a well-formed error object
        import traceback

        traceback.print_exc(file=sys.stderr)
        _emit(PluginError(INTERNAL, f"vswitch-cni internal error: {exc!r}").to_json(
            error_version(raw)))
        return 1
    if out is not None:
        _emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
