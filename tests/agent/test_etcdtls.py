"""etcd TLS settings: the config's rules across keys, the files checked before any connection, and
gRPC's TLS failures put into words. No etcd here (tests/store/test_store_tls.py and
tests/integration/test_etcd_tls.py connect to a real one).

Plan:
- config: https:// endpoints with EtcdCAFile (and a client certificate) load, `etcd_tls` carries
  the three paths, http:// gives none; refused naming the key: http:// and https:// mixed, a
  certificate without its key and a key without its certificate (naming both keys), https://
  without EtcdCAFile, TLS files beside http:// endpoints, relative paths.
- files (real certificates made with openssl): good ones read; each bad one refused naming the
  key, the file and the reason: missing, unreadable (a directory; the tests run as root, whom
  file modes do not stop), empty, binary DER, a key given
  as certificate, a certificate given as key, a corrupt PEM block, an encrypted key, a key of
  another certificate; preflight turns that into a ConfigError naming key and file.
- explain: the gRPC details seen from grpcio 1.85 for a wrong CA, a server certificate for
  another name, a client without (or with a refused) certificate, a plain-http server, credentials
  gRPC cannot use: each named; a TLS 1.2 server's alerts (a refused certificate is named as one,
  any other is passed on); an ordinary refused connection is no TLS failure.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.app.config import ConfigError, parse
from agent.app.preflight import preflight
from agent.state.etcd_tls import EtcdTLS, TLSFileError, explain
from testbed.pki import CA, OPENSSL, Cert, Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[CA, Cert, Cert]:
    """A CA, a client certificate it signed and another one (its key fits no other)."""
    ca = Pki(tmp_path_factory.mktemp("pki")).ca("ca")
    return ca, ca.issue("agent"), ca.issue("other")


def tls_config(tmp: Path, **keys: object) -> dict[str, object]:
    return {"EtcdEndpoints": ["https://10.0.0.1:2379", "https://10.0.0.2:2379"],
            "StateDir": str(tmp / "state"), "CNISocket": str(tmp / "run" / "cni.sock"),
            "HTTPAddress": "127.0.0.1:9999", **keys}


# ---- config ---------------------------------------------------------------------------------

def test_https_endpoints_with_ca_and_client_certificate_load(tmp_path: Path) -> None:
    cfg = parse(tls_config(tmp_path, EtcdCAFile="/etc/tls/ca.crt", EtcdCertFile="/etc/tls/c.crt",
                           EtcdKeyFile="/etc/tls/c.key"), env={})
    assert cfg.etcd_tls == EtcdTLS("/etc/tls/ca.crt", "/etc/tls/c.crt", "/etc/tls/c.key")
    server_auth_only = parse(tls_config(tmp_path, etcdCAFile="/etc/tls/ca.crt"), env={})
    assert server_auth_only.etcd_tls == EtcdTLS("/etc/tls/ca.crt")
    assert parse({}, env={}).etcd_tls is None


@pytest.mark.parametrize(("keys", "named", "reason"), [
    ({"EtcdEndpoints": ["http://10.0.0.1:2379", "https://10.0.0.2:2379"],
      "EtcdCAFile": "/ca.crt"}, "EtcdEndpoints", "mixes http:// and https://"),
    ({"EtcdCAFile": "/ca.crt", "EtcdCertFile": "/c.crt"}, "EtcdCertFile", "without EtcdKeyFile"),
    ({"EtcdCAFile": "/ca.crt", "EtcdKeyFile": "/c.key"}, "EtcdKeyFile", "without EtcdCertFile"),
    ({}, "EtcdCAFile", "must be set for https://"),
    ({"EtcdEndpoints": ["http://10.0.0.1:2379"], "EtcdCAFile": "/ca.crt"}, "EtcdCAFile",
     "EtcdEndpoints are http://"),
    ({"EtcdEndpoints": ["http://10.0.0.1:2379"], "EtcdCertFile": "/c.crt",
      "EtcdKeyFile": "/c.key"}, "EtcdCertFile", "EtcdEndpoints are http://"),
    ({"EtcdCAFile": "tls/ca.crt"}, "EtcdCAFile", "absolute path"),
])
def test_inconsistent_tls_settings_are_refused_by_key(
        tmp_path: Path, keys: dict[str, object], named: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(tls_config(tmp_path, **keys), env={})
    assert info.value.key == named
    assert reason in str(info.value)


# ---- files ----------------------------------------------------------------------------------

def test_good_files_are_read(pki: tuple[CA, Cert, Cert]) -> None:
    ca, agent, _ = pki
    material = EtcdTLS(str(ca.cert), str(agent.cert), str(agent.key)).read()
    assert material.ca == ca.cert.read_bytes()
    assert (material.cert, material.key) == (agent.cert.read_bytes(), agent.key.read_bytes())
    assert EtcdTLS(str(ca.cert)).read().cert is None


def bad_file(tmp: Path, pki: tuple[CA, Cert, Cert], kind: str) -> Path:
    agent = pki[1]
    path = tmp / f"{kind}.pem"
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_text("\n")
    elif kind == "der":
        subprocess.run([OPENSSL, "x509", "-in", str(agent.cert), "-outform", "der", "-out",
                        str(path)], check=True)
    elif kind == "corrupt":
        path.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                        "-----END CERTIFICATE-----\n")
    elif kind == "key":
        path.write_bytes(agent.key.read_bytes())
    return path


@pytest.mark.parametrize(("kind", "reason"), [
    ("missing", "cannot read: No such file or directory"),
    ("directory", "cannot read: Is a directory"),
    ("empty", "empty"),
    ("der", "not PEM (binary: DER?"),
    ("corrupt", "not a valid PEM certificate"),
    ("key", "not a PEM certificate: no BEGIN CERTIFICATE block (it holds a private key)"),
])
@pytest.mark.parametrize("key", ["EtcdCAFile", "EtcdCertFile"])
def test_a_bad_certificate_file_is_refused_naming_key_file_and_reason(
        tmp_path: Path, pki: tuple[CA, Cert, Cert], kind: str, reason: str, key: str) -> None:
    ca, agent, _ = pki
    path = str(bad_file(tmp_path, pki, kind))
    tls = (EtcdTLS(path, str(agent.cert), str(agent.key)) if key == "EtcdCAFile"
           else EtcdTLS(str(ca.cert), path, str(agent.key)))
    with pytest.raises(TLSFileError) as info:
        tls.read()
    assert (info.value.key, info.value.path) == (key, path)
    assert reason in info.value.reason


def test_bad_key_files_are_refused_naming_the_key_file(
        tmp_path: Path, pki: tuple[CA, Cert, Cert]) -> None:
    ca, agent, other = pki
    encrypted = tmp_path / "encrypted.key"
    subprocess.run([OPENSSL, "pkey", "-in", str(agent.key), "-aes256", "-passout", "pass:x",
                    "-out", str(encrypted)], check=True)
    corrupt = tmp_path / "corrupt.key"
    corrupt.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    cases = [
        (other.key, "does not belong to the certificate in EtcdCertFile"),
        (agent.cert, "not a PEM private key (it holds a certificate)"),
        (encrypted, "encrypted"),
        (corrupt, "not a valid PEM private key"),
        (tmp_path / "missing.key", "No such file or directory"),
    ]
    for path, reason in cases:
        with pytest.raises(TLSFileError) as info:
            EtcdTLS(str(ca.cert), str(agent.cert), str(path)).read()
        assert (info.value.key, info.value.path) == ("EtcdKeyFile", str(path))
        assert reason in info.value.reason, path


def test_preflight_refuses_a_bad_file_by_key_and_file(
        tmp_path: Path, pki: tuple[CA, Cert, Cert]) -> None:
    ca, agent, other = pki
    cfg = parse(tls_config(tmp_path, EtcdCAFile=str(ca.cert), EtcdCertFile=str(agent.cert),
                           EtcdKeyFile=str(other.key)), env={})
    with pytest.raises(ConfigError) as info:
        preflight(cfg)
    assert (info.value.key, info.value.value) == ("EtcdKeyFile", str(other.key))
    assert "does not belong to the certificate" in str(info.value)
    good = parse(tls_config(tmp_path, EtcdCAFile=str(ca.cert), EtcdCertFile=str(agent.cert),
                            EtcdKeyFile=str(agent.key)), env={})
    preflight(good)


# ---- gRPC's failures ------------------------------------------------------------------------

TLS = EtcdTLS("/tls/ca.crt", "/tls/agent.crt", "/tls/agent.key")
URL = "https://127.0.0.1:2379"
LAST = "failed to connect to all addresses; last error: "


@pytest.mark.parametrize(("details", "tls", "said"), [
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
     "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: "
     "unable to get local issuer certificate: OK", TLS,
     "certificate verify failed (unable to get local issuer certificate): the etcd server's "
     "certificate at https://127.0.0.1:2379 is not trusted by EtcdCAFile /tls/ca.crt"),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Custom verification check failed with error: "
     "UNAUTHENTICATED: Hostname Verification Check failed.", TLS,
     "hostname mismatch: the etcd server's certificate at https://127.0.0.1:2379 is not for "
     "127.0.0.1"),
    (LAST + "UNAVAILABLE: ipv4:127.0.0.1:2379: Unwrap failed (TSI_DATA_CORRUPTED)",
     EtcdTLS("/tls/ca.crt"), "demands a client certificate (etcd --client-cert-auth): set "
     "EtcdCertFile and EtcdKeyFile"),
    (LAST + "UNAVAILABLE: ipv4:127.0.0.1:2379: Unwrap failed (TSI_DATA_CORRUPTED)", TLS,
     "refused this client's certificate (EtcdCertFile /tls/agent.crt)"),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
     "SSL_ERROR_SSL: error:10000412:SSL routines:OPENSSL_internal:SSLV3_ALERT_BAD_CERTIFICATE",
     TLS, "refused this client's certificate (EtcdCertFile /tls/agent.crt)"),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Tls handshake failed (TSI_PROTOCOL_FAILURE): "
     "SSL_ERROR_SSL: error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE",
     TLS, "handshake with https://127.0.0.1:2379 failed: error:10000410:SSL routines:"),
    (LAST + "UNAVAILABLE: ipv4:127.0.0.1:2379: Handshake read failed (Socket closed)", TLS,
     "the server closed the connection (does it serve TLS on that port?)"),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Failed to create security handshaker.", TLS,
     "gRPC could not set up TLS"),
    (LAST + "UNKNOWN: ipv4:127.0.0.1:2379: Ssl handshake failed: SSL_ERROR_SSL: NO_CIPHERS",
     TLS, "the TLS handshake with https://127.0.0.1:2379 failed: NO_CIPHERS"),
])
def test_grpc_tls_failures_are_named(details: str, tls: EtcdTLS, said: str) -> None:
    assert said in explain(details, tls, URL)


def test_a_refused_connection_is_no_tls_failure() -> None:
    details = (LAST + "UNAVAILABLE: ipv4:127.0.0.1:2379: Failed to connect to remote host: "
               "Connection refused")
    assert explain(details, TLS, URL) == ""
