"""The plugin's one error type: a CNI error object (code, msg, details) ready to print.

Codes are those of the CNI spec 1.1.0 plus ours (agent/model/errors.py holds the agent's mirror of
this
table; the plugin cannot import it, it is stdlib-only). Every failure the plugin meets ends up as a
PluginError raised at the point where its cause is known, and cni_client/main.py prints it.
"""

from __future__ import annotations

INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_READY = 50
DEGRADED = 51
INTERNAL = 999


class PluginError(Exception):
    """A failure reported to the runtime as the spec's error object on stdout."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, object]:
        out: dict[str, object] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out
