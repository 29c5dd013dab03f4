"""WireGuard on Linux: this node's key file, the device, its peers, all through the `wg` tool.

The device is the kernel's WireGuard (a `wireguard` link) where the kernel has it; where it has
not (this project's test machines), wireguard-go, Debian's userspace implementation: it makes a
TUN device of the same name and answers WireGuard's cross-platform UAPI on
/var/run/wireguard/<name>.sock. `wg` (wireguard-tools) speaks to both, netlink to the kernel's
and the UAPI socket to wireguard-go's, so everything after the device's creation is one code
path. `Implementation` says which one a node may use: "auto" (the kernel's, else wireguard-go),
"kernel" or "wireguard-go"; a node that can use neither refuses to start (no clear-text fallback).

wireguard-go daemonizes: the device and its settings outlive an agent restart, as the kernel's
do, and the device's deletion (teardown) ends it.

The private key lives in one file (`KeyFile`, mode 0600, in StateDir) and reaches `wg` only as
that file's path (`wg set ... private-key FILE`): never on a command line, in the environment, a
log or an exception. `wg show dump` prints it on its first line; `Device.status` drops it there.
"""

from __future__ import annotations

import base64
import binascii
import errno
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import NetlinkError

from agent.linux import netlink
from agent.linux.iproute import Session
from agent.model.errors import DataplaneFailure, InvalidConfig
from agent.model.node import fingerprint

log = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "kernel", "wireguard-go")
SOCKET_DIR = "/var/run/wireguard"  # wireguard-go's and wg's, compiled into both
KEEPALIVE = 25  # seconds; on the peers a node starts handshakes with (see Device.set_peer)
WG_TIMEOUT = 10.0


def _wg(*args: str, stdin: str | None = None) -> str:
    """Runs `wg ARGS`; its output. A failure is DataplaneFailure with wg's own message."""
    try:
        done = subprocess.run(["wg", *args], input=stdin, capture_output=True, text=True,
                              timeout=WG_TIMEOUT)
    except FileNotFoundError:
        raise DataplaneFailure("the wg tool (wireguard-tools) is not installed") from None
    except subprocess.TimeoutExpired:
        raise DataplaneFailure(f"wg {args[0]} did not answer within {WG_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        raise DataplaneFailure(f"wg {' '.join(args[:2])} failed: "
                               f"{done.stderr.strip() or done.returncode}")
    return done.stdout


def check_key(text: str, where: str) -> str:
    """`text` as a WireGuard key (base64 of 32 bytes); InvalidConfig naming `where` otherwise."""
    key = text.strip()
    try:
        ok = len(base64.b64decode(key, validate=True)) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise InvalidConfig(f"{where} holds no WireGuard key (base64 of 32 bytes)",
                            "remove it: the agent makes a new one")
    return key


def public_key(private: str) -> str:
    return check_key(_wg("pubkey", stdin=private + "\n"), "wg pubkey's answer")


class KeyFile:
    """This node's private key: one file, mode 0600, written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def ensure(self) -> str:
        """The public key of the node's key, made first when there is none."""
        if not self.path.exists():
            self._write(_wg("genkey"))
            log.info("made this node's WireGuard key %s (public key fingerprint %s)",
                     self.path, fingerprint(self.public()))
        return self.public()

    def public(self) -> str:
        mode = self.path.stat().st_mode & 0o777
        if mode & 0o077:
            os.chmod(self.path, 0o600)
            log.warning("%s was readable by others (mode %o): set to 0600", self.path, mode)
        return public_key(check_key(self.path.read_text(), str(self.path)))

    def private_bytes(self) -> bytes:
        """The private key's 32 bytes: for VPP's wireguard plugin, which takes it in its API
        request over the node's own socket (agent/dataplane/vpp/wireguard.py). Never logged."""
        return base64.b64decode(check_key(self.path.read_text(), str(self.path)))

    def rotate(self) -> str:
        """A new key in place of the old one; its public key."""
        self._write(_wg("genkey"))
        return self.public()

    def stamp(self) -> tuple[int, int]:
        """Changes whenever the file is replaced (inode, mtime): how the agent sees a rotation."""
        st = self.path.stat()
        return st.st_ino, st.st_mtime_ns

    def _write(self, private: str) -> None:
        check_key(private, "wg genkey's answer")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".wireguard-", dir=self.path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as out:
                out.write(private.strip() + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class PeerStatus:
    public_key: str
    endpoint: str
    allowed_ips: tuple[str, ...]
    latest_handshake: int  # Unix seconds; 0: never
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class DeviceStatus:
    public_key: str
    listen_port: int
    peers: tuple[PeerStatus, ...]


def parse_dump(text: str) -> DeviceStatus:
    """`wg show IF dump`: the device line (its private key dropped here), then one per peer."""
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    if not lines or len(lines[0]) < 3:
        raise DataplaneFailure("wg show dump: no device line")
    _, public, port = lines[0][:3]
    peers = []
    for fields in lines[1:]:
        if len(fields) < 7:
            raise DataplaneFailure(f"wg show dump: a peer line of {len(fields)} fields")
        allowed = tuple(a for a in fields[3].split(",") if a and a != "(none)")
        peers.append(PeerStatus(fields[0], "" if fields[2] == "(none)" else fields[2], allowed,
                                int(fields[4]), int(fields[5]), int(fields[6])))
    return DeviceStatus("" if public == "(none)" else public, int(port), tuple(peers))


def endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class Device:
    """One WireGuard device in the calling thread's network namespace."""

    def __init__(self, ifname: str, port: int, key: KeyFile,
                 implementation: str = "auto") -> None:
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(implementation)
        self.ifname = ifname
        self.port = port
        self.key = key
        self.implementation = implementation
        self.running = ""  # "kernel" or "wireguard-go" once ensure() made or found it

    def ensure(self, mtu: int) -> int:
        """The device, made when missing, with the node's key, port and `mtu`, up; its index."""
        with netlink.host_session() as links, netlink.translated("making the WireGuard device"):
            index = links.ifindex(self.ifname)
            if index is not None and not self._usable(links.link_kind(index)):
                links.delete_link(index)
                index = None
            if index is None:
                index = self._make(links)
        self.configure()
        with netlink.host_session() as links, netlink.translated("setting up the WireGuard device"):
            link = links.link(index)
            if link.mtu != mtu or not link.up:
                links.set_link(index, up=True, mtu=mtu)
        return index

    def configure(self) -> None:
        """The node's (current) key and the listen port, each set only when it differs: a
        listen port set again, even to the same value, makes wireguard-go rebind its socket,
        and a handshake arriving meanwhile is lost (its sender retries only after 5 s)."""
        held = self.status()
        args = [] if held.listen_port == self.port else ["listen-port", str(self.port)]
        if held.public_key != self.key.public():
            args += ["private-key", str(self.key.path)]
        if args:
            _wg("set", self.ifname, *args)

    def _usable(self, kind: str) -> bool:
        """A link of this name that is a WireGuard device `wg` reaches (kept over a restart)."""
        if kind == "wireguard":
            self.running = "kernel"
        elif kind == "tun" and Path(SOCKET_DIR, f"{self.ifname}.sock").exists():
            self.running = "wireguard-go"
        else:
            log.warning("link %s is no WireGuard device (kind %r): replaced", self.ifname, kind)
            return False
        return self.implementation in ("auto", self.running)

    def _make(self, links: Session) -> int:
        if self.implementation in ("auto", "kernel"):
            try:
                index = links.add_wireguard(self.ifname)
                self.running = "kernel"
                return index
            except NetlinkError as exc:
                if exc.code != errno.EOPNOTSUPP or self.implementation == "kernel":
                    raise InvalidConfig(
                        f"the kernel's WireGuard is not available here ({os.strerror(exc.code)})",
                        "load the wireguard module, or set WireGuardImplementation to "
                        "wireguard-go or auto") from None
        _start_wireguard_go(self.ifname)
        self.running = "wireguard-go"
        made = links.ifindex(self.ifname)
        if made is None:
            raise DataplaneFailure(f"wireguard-go made no link {self.ifname}")
        return made

    def set_peer(self, public: str, ip: str, port: int, allowed: list[str],
                 initiate: bool) -> None:
        """Adds or updates a peer: its endpoint and exactly `allowed` as its allowed IPs. With
        `initiate`, a persistent keepalive too, whose first one (sent as the peer is added)
        starts a handshake at once; without, this side starts one only when it has a packet
        for the peer. Two sides that both start one at the same moment cross: wireguard-go then
        answers each with a session that may not carry traffic for seconds, so only one side
        of each pair initiates (agent/dataplane/wireguard_mesh.py)."""
        keepalive = str(KEEPALIVE) if initiate else "off"
        _wg("set", self.ifname, "peer", public, "endpoint", endpoint(ip, port),
            "persistent-keepalive", keepalive, "allowed-ips", ",".join(allowed))

    def remove_peer(self, public: str) -> None:
        _wg("set", self.ifname, "peer", public, "remove")

    def status(self) -> DeviceStatus:
        return parse_dump(_wg("show", self.ifname, "dump"))

    def delete(self) -> bool:
        """Removes the device (wireguard-go exits with it); False when there was none."""
        with netlink.host_session() as links, netlink.translated("removing the WireGuard device"):
            return links.delete_link_named(self.ifname)


def _start_wireguard_go(ifname: str) -> None:
    """Starts wireguard-go for `ifname`; it daemonizes once the device and its socket exist."""
    binary = shutil.which("wireguard-go")
    if binary is None:
        raise InvalidConfig(
            "this kernel has no WireGuard and wireguard-go is not installed",
            "install wireguard-go (Debian: apt install wireguard-go), or load the kernel's "
            "wireguard module")
    # The daemon inherits stdout (its log) and stderr: a file, never a pipe whose reader would
    # wait for the daemon to end.
    with tempfile.TemporaryFile() as out:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "LOG_LEVEL": "error"}
        started = time.monotonic()
        done = subprocess.run([binary, ifname], stdout=out, stderr=out, env=env,
                              start_new_session=True, timeout=WG_TIMEOUT, check=False)
        if done.returncode != 0:
            out.seek(0)
            text = out.read().decode(errors="replace").strip().splitlines()
            raise DataplaneFailure(f"wireguard-go {ifname} failed: "
                                   f"{text[-1] if text else done.returncode}")
    log.info("wireguard-go started for %s in %.0f ms (this kernel has no WireGuard)", ifname,
             (time.monotonic() - started) * 1000)


__all__ = ["IMPLEMENTATIONS", "Device", "DeviceStatus", "KeyFile", "PeerStatus", "fingerprint",
           "parse_dump", "public_key"]
