"""Throwaway certificates for a TLS etcd on the test bed, made with Debian's `openssl` CLI.

    ca = Pki(directory).ca("test-ca")
    server = ca.issue("etcd", server=True, sans=("IP:127.0.0.1",))
    client = ca.issue("agent")

or all that the etcd TLS tests use at once: `EtcdPki.make(directory)`; a bare key pair (a
Kubernetes API server's service-account signing key): `Pki(directory).key_pair("sa")`.

Every key is an unencrypted EC P-256 key (fast to make); certificates are valid for two days.
Each certificate is made from a config file of its own (never the machine's openssl.cnf, whose
defaults differ between systems): a CA has basicConstraints CA:TRUE and may sign certificates,
a leaf has CA:FALSE and serverAuth (with its subject alternative names) or clientAuth.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "/usr/bin/openssl"
DAYS = "2"


@dataclass(frozen=True)
class Cert:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class CA(Cert):
    directory: Path

    def issue(self, name: str, *, server: bool = False, sans: tuple[str, ...] = ()) -> Cert:
        """A leaf certificate signed by this CA: a server's (serverAuth, `sans` like
        "IP:127.0.0.1" or "DNS:etcd.example") or a client's (clientAuth)."""
        usage = "serverAuth" if server else "clientAuth"
        ext = ["basicConstraints = critical,CA:FALSE",
               "keyUsage = critical,digitalSignature,keyEncipherment",
               f"extendedKeyUsage = {usage}"]
        if sans:
            ext.append(f"subjectAltName = {','.join(sans)}")
        conf = _config(self.directory, name, ext)
        out = Cert(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        csr = self.directory / f"{name}.csr"
        _run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(out.key), "-out", str(csr), "-config", str(conf))
        _run("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
             "-set_serial", f"0x{secrets.token_hex(8)}", "-days", DAYS, "-out", str(out.cert),
             "-extfile", str(conf), "-extensions", "ext")
        return out


class Pki:
    """Makes CAs (and through them, certificates) in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def ca(self, name: str) -> CA:
        conf = _config(self.directory, name, [
            "basicConstraints = critical,CA:TRUE",
            "keyUsage = critical,keyCertSign,cRLSign",
            "subjectKeyIdentifier = hash",
        ])
        ca = CA(self.directory / f"{name}.crt", self.directory / f"{name}.key", self.directory)
        _run("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(ca.key), "-out", str(ca.cert), "-days", DAYS,
             "-config", str(conf), "-extensions", "ext")
        return ca

    def key_pair(self, name: str) -> Cert:
        """A bare EC P-256 key pair, no certificate: `cert` is the public key (PEM), `key` the
        private key."""
        out = Cert(self.directory / f"{name}.pub", self.directory / f"{name}.key")
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(out.key))
        _run("pkey", "-in", str(out.key), "-pubout", "-out", str(out.cert))
        return out


def _config(directory: Path, name: str, ext: list[str]) -> Path:
    path = directory / f"{name}.cnf"
    path.write_text("\n".join([
        "[req]", "distinguished_name = dn", "prompt = no", "x509_extensions = ext",
        "[dn]", f"CN = {name}", "[ext]", *ext, "",
    ]))
    return path


def _run(*argv: str) -> None:
    done = subprocess.run([OPENSSL, *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {argv[0]} failed: {done.stderr.strip()}")


@dataclass(frozen=True)
class EtcdPki:
    """The certificates of the etcd TLS tests: `ca` signed `server` (for 127.0.0.1),
    `misnamed` (a server certificate for another name) and `client`; `other_ca` is a CA
    nobody uses, and it signed `stranger` (a client certificate etcd does not trust)."""

    ca: CA
    other_ca: CA
    server: Cert
    misnamed: Cert
    client: Cert
    stranger: Cert

    @classmethod
    def make(cls, directory: Path) -> EtcdPki:
        pki = Pki(directory)
        ca, other = pki.ca("ca"), pki.ca("other-ca")
        return cls(
            ca=ca,
            other_ca=other,
            server=ca.issue("etcd", server=True, sans=("IP:127.0.0.1",)),
            misnamed=ca.issue("etcd-elsewhere", server=True,
                              sans=("DNS:etcd.example", "IP:192.0.2.1")),
            client=ca.issue("agent"),
            stranger=other.issue("stranger"),
        )
