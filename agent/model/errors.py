"""The agent's error hierarchy: every failure a CNI request can meet, with its CNI error code.

    CniError                   base; carries `code`, `msg`, `details`
    ├── IncompatibleVersion    1   cniVersion not supported
    ├── UnsupportedField       2   a config field we refuse
    ├── UnknownContainer       3   the container / attachment does not exist
    ├── InvalidEnvironment     4   a CNI_* value is missing or invalid (names the variable)
    ├── IOFailure              5   I/O error
    ├── DecodeFailure          6   the config could not be decoded
    ├── InvalidConfig          7   the config is invalid (names the field)
    ├── TryAgainLater          11  transient: store or vswitch unreachable, agent not ready
    │   └── EtcdTLSFailure     11  etcd answered, but the TLS handshake failed (names why)
    ├── NotReady               50  STATUS: the plugin cannot accept ADDs
    ├── Degraded               51  STATUS: existing pods may have lost connectivity
    ├── IPAMFailure            100 no address could be allocated (subnet exhausted, ...)
    ├── DataplaneFailure       101 the vswitch or kernel refused a wiring step
    ├── PodSideFailure         102 configuring the pod's network namespace failed
    └── InternalError          999 a bug: the message says what and where

Library errors (netlink, etcd, vpp-papi) are translated into this tree at the boundary of the
module that calls the library, with the library error chained as `__cause__`; agent/api/grpc_server
maps a CniError to the gRPC reply in exactly one place.
"""

from __future__ import annotations


class CniError(Exception):
    """A failure that is reported to the runtime as a CNI error object."""

    code: int = 999

    def __init__(self, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details

    def __str__(self) -> str:
        return f"{self.msg}: {self.details}" if self.details else self.msg


class IncompatibleVersion(CniError):
    code = 1


class UnsupportedField(CniError):
    code = 2


class UnknownContainer(CniError):
    code = 3


class InvalidEnvironment(CniError):
    code = 4


class IOFailure(CniError):
    code = 5


class DecodeFailure(CniError):
    code = 6


class InvalidConfig(CniError):
    code = 7


class TryAgainLater(CniError):
    code = 11


class EtcdTLSFailure(TryAgainLater):
    """etcd's TLS handshake failed (a CA, a certificate, a name that does not fit): retryable
    like any etcd outage (certificates get fixed and rotated while agents run), but named as
    what it is, never as a plain "unreachable"."""


class NotReady(CniError):
    code = 50


class Degraded(CniError):
    code = 51


class IPAMFailure(CniError):
    code = 100


class DataplaneFailure(CniError):
    code = 101


class PodSideFailure(CniError):
    code = 102


class InternalError(CniError):
    code = 999
