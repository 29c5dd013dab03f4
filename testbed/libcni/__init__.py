"""Build and drive the libcni conformance driver (testbed/libcni/driver.go).

The driver is a small Go program on libcni 1.3.0, the library containerd and CRI-O use to run CNI
plugins. Driving our plugin through it, instead of exec'ing it with hand-made environments, proves
that a real runtime accepts what the plugin prints: libcni parses every result and error with its
own types, passes results down a chain as prevResult, caches them for CHECK and DEL, and injects
the GC keys. This module builds the driver offline (GOPATH mode against the libcni source, with the
Go 1.23 toolchain, both of which .ci/install-system unpacks under .cache/; no module proxy) and
wraps its command line in `Libcni`.

`build_driver` fails with `LibcniUnavailable` naming what is missing and how to get it: a missing
toolchain must fail the run loudly, never skip the conformance suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pyroute2 import IPRoute

from testbed.tools import REPO

DRIVER_SOURCE = Path(__file__).with_name("driver.go")
# Git-ignored; binaries are keyed by a source digest, so sessions share them safely.
DEFAULT_BUILD_DIR = Path(__file__).with_name("bin")
# Unpacked .debs (never installed): sid's libcni source and plugins, bookworm-backports' Go.
SID_ROOT = REPO / ".cache" / "sid"
BACKPORTS_ROOT = REPO / ".cache" / "backports"
GOCODE = SID_ROOT / "usr" / "share" / "gocode"
REFERENCE_PLUGINS = SID_ROOT / "usr" / "lib" / "cni"
GO = BACKPORTS_ROOT / "usr" / "lib" / "go-1.23" / "bin" / "go"
LIBCNI_SOURCE = GOCODE / "src" / "github.com" / "containernetworking" / "cni" / "libcni"
INSTALL_HINT = "run `make setup` (as root): it fetches Go 1.23, libcni 1.3.0 and the plugins"

JsonDict = dict[str, Any]
IFF_PROMISC = 0x100

# Reference plugins to chain after a first plugin: portmap takes port mappings from the runtime
# (a capability arg) and reads the pod IP from prevResult; tuning changes the pod interface that
# prevResult names. Both fail if the first plugin's result is not a valid prevResult.
PORTMAP_CONF: JsonDict = {"type": "portmap", "capabilities": {"portMappings": True}}
TUNING_CONF: JsonDict = {"type": "tuning", "promisc": True}


class LibcniUnavailable(RuntimeError):
    """The Go toolchain, the libcni source or the reference plugins are missing."""


class DriverResult(NamedTuple):
    """Exit status and parsed stdout of one driver run (stderr folded in on failure)."""

    rc: int
    out: JsonDict


def unique(prefix: str) -> str:
    """A short name unique on this machine across concurrent test sessions (fits IFNAMSIZ)."""
    return f"{prefix}{os.getpid() % 10000:04d}{secrets.token_hex(2)}"


def nat_rules(netns_path: Path) -> list[str]:
    """The NAT table of a namespace as `iptables -S` lines (what portmap programmed)."""
    proc = subprocess.run(["nsenter", f"--net={netns_path}", "--", "iptables", "-t", "nat", "-S"],
                          capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout.splitlines()


def is_promisc(netns_path: Path, ifname: str) -> bool:
    """Whether ifname in the namespace is in promiscuous mode (what tuning set)."""
    with IPRoute(netns=str(netns_path), flags=0) as ipr:
        (index,) = ipr.link_lookup(ifname=ifname)
        return bool(ipr.get_links(index)[0]["flags"] & IFF_PROMISC)


def check_prerequisites() -> None:
    """Raise LibcniUnavailable naming every missing piece the harness needs."""
    missing = [
        f"{what} ({path})"
        for what, path in (
            ("Go 1.23", GO),
            ("libcni 1.3.0 source", LIBCNI_SOURCE / "api.go"),
            ("reference CNI plugins 1.9.1", REFERENCE_PLUGINS / "bridge"),
            ("iptables (for portmap)", Path(shutil.which("iptables") or "/usr/sbin/iptables")),
        )
        if not path.exists()
    ]
    if missing:
        raise LibcniUnavailable(f"missing {', '.join(missing)}: {INSTALL_HINT}")


def _source_digest() -> str:
    # The driver source and the libcni API it compiles against decide the binary.
    digest = hashlib.sha256(DRIVER_SOURCE.read_bytes())
    for name in ("api.go", "conf.go"):
        digest.update((LIBCNI_SOURCE / name).read_bytes())
    return digest.hexdigest()[:16]


def build_driver(out_dir: Path) -> Path:
    """Build the driver into out_dir (once per source version) and return the binary's path."""
    check_prerequisites()
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / f"libcni-driver-{_source_digest()}"
    if binary.exists():
        return binary
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{DRIVER_SOURCE.parent}:{GOCODE}",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOROOT": str(GO.parents[1]),  # this toolchain's own, whatever the caller's env says
        "GOTOOLCHAIN": "local",
        "GOCACHE": str(REPO / ".cache" / "go-build"),
        "CGO_ENABLED": "0",
    }
    # Build under a temporary name and rename: concurrent sessions may build at the same time,
    # and a half-written binary must never be exec'd.
    tmp = Path(tempfile.mkdtemp(dir=out_dir, prefix=".build-")) / "driver"
    try:
        proc = subprocess.run(
            [str(GO), "build", "-o", str(tmp), str(DRIVER_SOURCE)],
            env=env, capture_output=True, text=True, timeout=600, check=False,
        )
        if proc.returncode != 0:
            raise LibcniUnavailable(f"building {DRIVER_SOURCE} failed:\n{proc.stderr}")
        os.replace(tmp, binary)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.parent.rmdir()
    return binary


class Libcni:
    """Runs CNI verbs through the driver; each method returns (rc, parsed JSON).

    `bin_dirs` is the plugin search path handed to libcni; `cache_dir` is libcni's result cache
    (CHECK and DEL read it, GC walks it); `netns_path`, when given, is the network namespace the
    driver itself runs in, so that host-side objects (bridges, veth ends) land there, not on the
    machine.
    """

    def __init__(
        self,
        driver: Path,
        bin_dirs: Sequence[Path],
        cache_dir: Path,
        *,
        netns_path: Path | None = None,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.driver = driver
        self.bin_dirs = list(bin_dirs)
        self.cache_dir = cache_dir
        self.netns_path = netns_path
        self.timeout = timeout
        self.env = dict(env) if env is not None else None

    def add(self, conflist: Path | Mapping[str, Any], container_id: str, netns: Path | str,
            ifname: str = "eth0", *, args: Mapping[str, str] | None = None,
            capability_args: Mapping[str, Any] | None = None) -> DriverResult:
        return self._attachment("add", conflist, container_id, netns, ifname, args,
                                capability_args)

    def check(self, conflist: Path | Mapping[str, Any], container_id: str, netns: Path | str,
              ifname: str = "eth0", *, args: Mapping[str, str] | None = None,
              capability_args: Mapping[str, Any] | None = None) -> DriverResult:
        return self._attachment("check", conflist, container_id, netns, ifname, args,
                                capability_args)

    def delete(self, conflist: Path | Mapping[str, Any], container_id: str, netns: Path | str,
               ifname: str = "eth0", *, args: Mapping[str, str] | None = None,
               capability_args: Mapping[str, Any] | None = None) -> DriverResult:
        return self._attachment("del", conflist, container_id, netns, ifname, args,
                                capability_args)

    def gc(self, conflist: Path | Mapping[str, Any],
           valid_attachments: Sequence[tuple[str, str]] | None = None, *,
           key: str = "both") -> DriverResult:
        """GC the network; key is 'both' (libcni's own GC), 'valid-attachments' or 'attachments'."""
        flags = ["--conflist", str(self._conflist_path(conflist)), "--gc-key", key]
        if valid_attachments is not None:
            attachments = [{"containerID": c, "ifname": i} for c, i in valid_attachments]
            flags += ["--valid-attachments", json.dumps(attachments)]
        return self.run("gc", flags)

    def status(self, conflist: Path | Mapping[str, Any]) -> DriverResult:
        return self.run("status", ["--conflist", str(self._conflist_path(conflist))])

    def version(self, conflist: Path | Mapping[str, Any] | None = None, *,
                plugin: str | None = None) -> DriverResult:
        """VERSION of one plugin type, or of every plugin in a conflist: {type: info}."""
        if plugin is not None:
            return self.run("version", ["--plugin", plugin])
        if conflist is None:
            raise ValueError("version needs a conflist or a plugin type")
        return self.run("version", ["--conflist", str(self._conflist_path(conflist))])

    def _attachment(self, verb: str, conflist: Path | Mapping[str, Any], container_id: str,
                    netns: Path | str, ifname: str, args: Mapping[str, str] | None,
                    capability_args: Mapping[str, Any] | None) -> DriverResult:
        flags = ["--conflist", str(self._conflist_path(conflist)),
                 "--container-id", container_id, "--netns", str(netns), "--ifname", ifname]
        if args:
            flags += ["--args", ";".join(f"{k}={v}" for k, v in args.items())]
        if capability_args is not None:
            flags += ["--capability-args", json.dumps(capability_args)]
        return self.run(verb, flags)

    def _conflist_path(self, conflist: Path | Mapping[str, Any]) -> Path:
        if isinstance(conflist, Path):
            return conflist
        text = json.dumps(conflist, indent=1, sort_keys=True)
        name = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = self.cache_dir / "conflists" / f"{name}.conflist"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, verb: str, flags: Sequence[str]) -> DriverResult:
        """Run the driver with raw flags; bin dir, cache dir and timeout are added here."""
        argv = [str(self.driver), verb, *flags,
                "--bin-dir", ":".join(str(d) for d in self.bin_dirs),
                "--cache-dir", str(self.cache_dir), "--timeout", f"{self.timeout}s"]
        if self.netns_path is not None:
            argv = ["nsenter", f"--net={self.netns_path}", "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              timeout=self.timeout + 30, check=False)
        return DriverResult(proc.returncode, _parse_output(proc))


def _parse_output(proc: subprocess.CompletedProcess[str]) -> JsonDict:
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        out = {"error": f"driver printed no JSON: {proc.stdout!r}", "code": None}
    if not isinstance(out, dict):
        out = {"error": f"driver printed a non-object: {out!r}", "code": None}
    if proc.returncode != 0:
        out["stderr"] = proc.stderr
    return out
