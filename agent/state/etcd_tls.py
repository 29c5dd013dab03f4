"""TLS to etcd: the client's credentials from the config's files, checked before any connection,
and gRPC's TLS failures put into words.

The files (docs/config.md): `EtcdCAFile`, the CA that etcd's server certificate chains to (needed
for https:// endpoints); `EtcdCertFile` and `EtcdKeyFile`, this client's certificate and key, for
an etcd started with `--client-cert-auth` (both or neither). One set serves every endpoint, as one
`grpc.ssl_channel_credentials` (pyetcd's `ca_cert`, `cert_key`, `cert_cert` become exactly its
`root_certificates`, `private_key`, `certificate_chain`).

`EtcdTLS.read` checks the files with the standard library's OpenSSL, because gRPC checks nothing
when credentials are made: a bad file shows up only at the first connection, as an opaque
"Failed to create security handshaker". Each file must be readable, PEM of the right kind, the
key unencrypted (gRPC takes no passphrase) and the certificate's own. A failure is a
`TLSFileError` naming the config key, the file and the reason.

gRPC reports a failed handshake as nothing but an UNAVAILABLE call whose details carry its reason
(BoringSSL's wording, seen with grpcio 1.85); `explain` turns the known wordings into one line
that names the TLS failure and the setting to look at, and says nothing of other failures.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc

MAX_FILE = 1 << 20  # bytes; a certificate bundle is a few KiB, anything this big is a wrong path


class TLSFileError(Exception):
    """A TLS file the client cannot use: the key naming it, the path and why."""

    def __init__(self, key: str, path: str, reason: str) -> None:
        super().__init__(f"{key} {path}: {reason}")
        self.key = key
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Material:
    """The files' bytes, as gRPC takes them."""

    ca: bytes
    cert: bytes | None
    key: bytes | None


@dataclass(frozen=True)
class EtcdTLS:
    """Where the client's TLS files are (paths as the config gives them)."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""

    def read(self) -> Material:
        """The files' contents, each checked; raises TLSFileError for the first bad one."""
        ca = _read("EtcdCAFile", self.ca_file)
        _check_certificates("EtcdCAFile", self.ca_file, ca)
        if not self.cert_file:
            return Material(ca, None, None)
        cert = _read("EtcdCertFile", self.cert_file)
        _check_certificates("EtcdCertFile", self.cert_file, cert)
        key = _read("EtcdKeyFile", self.key_file)
        _check_key(self.key_file, key)
        _check_pair(self.cert_file, self.key_file)
        return Material(ca, cert, key)

    def credentials(self) -> grpc.ChannelCredentials:
        material = self.read()
        return grpc.ssl_channel_credentials(material.ca, material.key, material.cert)


def _read(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise TLSFileError(key, path, "not a regular file")
            data = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise TLSFileError(key, path, f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_FILE:
        raise TLSFileError(key, path, f"larger than {MAX_FILE >> 20} MiB: not a PEM file")
    if not data.strip():
        raise TLSFileError(key, path, "empty")
    return data


def _pem_text(key: str, path: str, data: bytes) -> str:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TLSFileError(key, path, "not PEM (binary: DER? convert it with "
                                      "`openssl x509 -inform der` or `openssl pkey -inform der`)"
                           ) from None
    return text


def _check_certificates(key: str, path: str, data: bytes) -> None:
    text = _pem_text(key, path, data)
    if "-----BEGIN CERTIFICATE-----" not in text:
        found = " (it holds a private key)" if "PRIVATE KEY-----" in text else ""
        raise TLSFileError(key, path, f"not a PEM certificate: no BEGIN CERTIFICATE block{found}")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise TLSFileError(key, path, f"not a valid PEM certificate: {_ssl_reason(exc)}") from None


def _check_key(path: str, data: bytes) -> None:
    text = _pem_text("EtcdKeyFile", path, data)
    if "ENCRYPTED" in text:
        raise TLSFileError("EtcdKeyFile", path, "the private key is encrypted (gRPC takes no "
                                                "passphrase): decrypt it with `openssl pkey`")
    if "PRIVATE KEY-----" not in text:
        found = " (it holds a certificate)" if "-----BEGIN CERTIFICATE-----" in text else ""
        raise TLSFileError("EtcdKeyFile", path, f"not a PEM private key{found}")


def _check_pair(cert_file: str, key_file: str) -> None:
    """The key is the certificate's (OpenSSL's own check, as gRPC's TLS library makes it)."""

    def no_passphrase() -> bytes:
        raise ValueError("encrypted")  # never prompt on a terminal

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
            cert_file, key_file, password=no_passphrase
        )
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            reason = ("the private key does not belong to the certificate in EtcdCertFile "
                      f"{cert_file}")
        else:
            reason = f"not a valid PEM private key: {_ssl_reason(exc)}"
        raise TLSFileError("EtcdKeyFile", key_file, reason) from None
    except (OSError, ValueError) as exc:  # changed since read, or encrypted after all
        raise TLSFileError("EtcdKeyFile", key_file, f"cannot be loaded: {exc}") from None


def _ssl_reason(exc: BaseException) -> str:
    """OpenSSL's words, without the C source location."""
    text = str(exc.args[1]) if isinstance(exc, ssl.SSLError) and len(exc.args) > 1 else str(exc)
    return text.split(" (_ssl.c")[0]


# ---- gRPC's TLS failures --------------------------------------------------------------------

# The server turned this client down: with TLS 1.3 its alert comes after the client's side of the
# handshake is done, and gRPC sees a record it cannot decrypt (TSI_DATA_CORRUPTED); with TLS 1.2
# the alert itself is named.
_CLIENT_REFUSED = ("TSI_DATA_CORRUPTED", "ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_REQUIRED",
                   "ALERT_UNKNOWN_CA", "ALERT_CERTIFICATE_EXPIRED")


def explain(details: str, tls: EtcdTLS, endpoint: str) -> str:
    """The TLS failure in gRPC's `details` of a failed call, in words; "" if it is none.
    `endpoint` is the URL that was asked (the name the server's certificate must hold)."""
    if "Hostname Verification Check failed" in details or "not in peer certificate" in details:
        return (f"hostname mismatch: the etcd server's certificate at {endpoint} is not for "
                f"{urlsplit(endpoint).hostname} (its subject alternative names must hold the "
                "name or IP that EtcdEndpoints gives)")
    if "CERTIFICATE_VERIFY_FAILED" in details:
        why = details.split("CERTIFICATE_VERIFY_FAILED", 1)[1].strip(": ").split(":")[0].strip()
        return (f"certificate verify failed ({why or 'no reason given'}): the etcd server's "
                f"certificate at {endpoint} is not trusted by EtcdCAFile {tls.ca_file}")
    if any(sign in details for sign in _CLIENT_REFUSED):
        if not tls.cert_file:
            return ("the etcd server refused this client during the TLS handshake: it demands a "
                    "client certificate (etcd --client-cert-auth): set EtcdCertFile and "
                    "EtcdKeyFile")
        return (f"the etcd server refused this client's certificate (EtcdCertFile "
                f"{tls.cert_file}) during the TLS handshake: expired, or not signed by a CA "
                "in etcd's --trusted-ca-file")
    if "Handshake read failed" in details:
        return (f"the TLS handshake with {endpoint} failed: the server closed the connection "
                "(does it serve TLS on that port?)")
    if "security handshaker" in details:
        return "gRPC could not set up TLS with EtcdCAFile, EtcdCertFile and EtcdKeyFile"
    if "andshake failed" in details:  # Tls/Ssl handshake failed, any other reason
        return f"the TLS handshake with {endpoint} failed: {details.rsplit(': ', 1)[-1]}"
    return ""
