"""The files `agent.install_cni` writes on a node: the plugin (launcher and code zip), reference
plugins, conflist, and the manifest that lists them so an uninstall removes exactly those.

Ownership rule: a file is ours only if the manifest lists it with the hash we wrote. A plugin
found already in the bin dir, or one of ours that someone replaced since, is somebody else's and
is never overwritten or deleted.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import zipapp
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cni_client
from cni_client.config import SUPPORTED_VERSIONS

MANIFEST = ".vswitch-cni.installed"  # no .json/.conf suffix: runtimes read those in conf dirs
SHEBANG_FLAGS = "-IS"  # isolated (no PYTHON* variables, no user site), no site import
# Where distributions put the reference plugins (Debian, Fedora, upstream tarballs).
DEFAULT_SOURCES = (Path("/usr/lib/cni"), Path("/usr/libexec/cni"), Path("/opt/cni/bin"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _replace(tmp: Path, target: Path, mode: int) -> None:
    os.chmod(tmp, mode)
    os.replace(tmp, target)


CODE_PREFIX = ".vswitch-cni-code-"  # the plugin's code: a zip beside its launcher
# The installed `vswitch-cni`. A plain script and not a zipapp: Python runs a zipapp through
# runpy, whose imports cost ~4.5 ms of every CNI call (python3 -X importtime).
LAUNCHER = """#!{interpreter}
# vswitch-cni, the CNI plugin, as agent.install_cni wrote it. Its code is the zip named below,
# beside this file; a plain script starts faster than a zipapp (no runpy).
import os
import sys
from os.path import dirname, join, realpath

sys.path.insert(0, join(dirname(realpath(__file__)), "{code}"))
try:
    from cni_client.main import main
except ImportError:
    sys.stdout.write('{{"cniVersion": "1.0.0", "code": 999, "msg": "vswitch-cni cannot load '
                     'its code ({code}, beside it): reinstall it with agent.install_cni"}}\\n')
    sys.exit(1)
code = main()
# The answer is written: exit without the interpreter's teardown (~1.5 ms of every call).
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


def build_plugin(target: Path, interpreter: str | None = None) -> Path:
    """Writes the plugin into `target`'s directory: its code, a zip named by its content hash,
    then `target`, the launcher script (mode 0755) run by `interpreter` (the shebang line after
    `#!`; default: this Python, pinned by absolute path). Both atomically; returns the zip.

    The zip's name changes with its content: an upgrade never rewrites the zip that a running
    plugin reads, and a launcher always names a complete zip."""
    source = Path(cni_client.__file__).resolve().parent
    line = interpreter or f"{sys.executable} {SHEBANG_FLAGS}"
    tmp = target.with_name(f".{target.name}.code.tmp")
    with tempfile.TemporaryDirectory() as stage:
        shutil.copytree(source, Path(stage) / "cni_client",
                        ignore=shutil.ignore_patterns("__pycache__", "*.md"))
        # Bytecode beside each module (zipimport reads only that layout, never __pycache__):
        # without it every exec compiles the plugin again, ~17 ms of each CNI call. Unchecked
        # hashes: zip timestamps cannot invalidate them; a host Python of another version
        # ignores them (other magic number) and compiles from the .py, as before.
        compileall.compile_dir(
            Path(stage) / "cni_client", quiet=1, legacy=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        # Still a zipapp too (`python3 ZIP` runs the plugin), which the launcher does not use.
        zipapp.create_archive(stage, tmp, main="cni_client.main:main")
    code = target.with_name(f"{CODE_PREFIX}{_sha256(tmp)[:16]}.pyz")
    _replace(tmp, code, 0o644)
    launcher = target.with_name(f".{target.name}.tmp")
    launcher.write_text(LAUNCHER.format(interpreter=line, code=code.name))
    _replace(launcher, target, 0o755)
    return code


def code_of(launcher: Path) -> Path | None:
    """The code zip an installed launcher runs (None: not a launcher of ours)."""
    try:
        text = launcher.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(rf'"({re.escape(CODE_PREFIX)}[0-9a-f]+\.pyz)"', text)
    return launcher.with_name(found.group(1)) if found else None


@dataclass(frozen=True)
class Conflist:
    """A network config list whose first plugin is ours."""

    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def version(self) -> str:
        return str(self.data.get("cniVersion", ""))

    def chained_types(self) -> list[str]:
        """The plugin types after ours, in order, each once."""
        types = [str(p.get("type", "")) for p in self.data["plugins"][1:]]
        return [t for i, t in enumerate(types) if t and t not in types[:i]]


# The conflist installed when none is given: the one k8s/base/configmap.yaml and the README ship
# (tests/install keeps the three equal). cniVersion 1.0.0: runtimes on a libcni older than 1.2.0
# (containerd 1.6, podman 4) refuse 1.1.0 results.
DEFAULT_CONFLIST_NAME = "10-vswitch.conflist"
DEFAULT_CONFLIST: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "vswitch",
    "plugins": [
        {"type": "vswitch-cni", "agentSocket": "/run/vswitch-cni/cni.sock", "timeoutSeconds": 30},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def read_conflist(source: Path | None) -> Conflist:
    """Reads a conflist (None: the default one) and checks it is one whose first plugin is ours,
    with a version we speak."""
    if source is None:
        return Conflist(Path(DEFAULT_CONFLIST_NAME), json.loads(json.dumps(DEFAULT_CONFLIST)))
    try:
        data = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{source}: cannot read the conflist: {exc}") from exc
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not isinstance(plugins, list) or not plugins or not isinstance(plugins[0], dict) \
            or plugins[0].get("type") != "vswitch-cni":
        raise SystemExit(f"{source}: not a conflist with vswitch-cni as its first plugin")
    if any(not isinstance(p, dict) or not isinstance(p.get("type"), str) for p in plugins):
        raise SystemExit(f"{source}: every entry of plugins needs a string field type")
    if data.get("cniVersion") not in SUPPORTED_VERSIONS:
        raise SystemExit(f"{source}: cniVersion {data.get('cniVersion')!r} is not one vswitch-cni "
                         f"supports ({', '.join(SUPPORTED_VERSIONS)})")
    return Conflist(source, data)


def install_conflist(conflist: Conflist | Path, conf_dir: Path) -> Path:
    """Writes the network config into `conf_dir` atomically; returns its path."""
    if isinstance(conflist, Path):
        conflist = read_conflist(conflist)
    target = conf_dir / conflist.name
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(conflist.data, indent=2) + "\n")
    _replace(tmp, target, 0o644)
    return target


class Manifest:
    """The files this installer wrote into a node's dirs, with their hashes. Names are kept
    relative to the two dirs (`bin/vswitch-cni`, `conf/10-vswitch.conflist`): an init container
    installs through /host/opt/cni/bin, the operator uninstalls on the node from /opt/cni/bin."""

    def __init__(self, bin_dir: Path, conf_dir: Path, files: dict[str, str]) -> None:
        self.dirs = {"bin": bin_dir, "conf": conf_dir}
        self.path = bin_dir / MANIFEST
        self.files = files

    @classmethod
    def load(cls, bin_dir: Path, conf_dir: Path) -> Manifest:
        path = bin_dir / MANIFEST
        try:
            files = json.loads(path.read_text())["files"]
            if not all(isinstance(k, str) and k.split("/")[0] in ("bin", "conf")
                       and isinstance(v, str) for k, v in files.items()):
                raise ValueError("entries must be bin/NAME or conf/NAME: sha256")
        except FileNotFoundError:
            files = {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"{path}: unreadable manifest ({exc}); remove it by hand") from exc
        return cls(bin_dir, conf_dir, dict(files))

    def _name(self, path: Path) -> str:
        for kind, directory in self.dirs.items():
            if path.parent == directory:
                return f"{kind}/{path.name}"
        raise ValueError(f"{path} is in neither {self.dirs['bin']} nor {self.dirs['conf']}")

    def _path(self, name: str) -> Path:
        kind, _, filename = name.partition("/")
        return self.dirs[kind] / filename

    def owns(self, path: Path) -> bool:
        """True when `path` is a file we wrote and nobody changed since."""
        want = self.files.get(self._name(path))
        return want is not None and path.is_file() and _sha256(path) == want

    def add(self, path: Path) -> None:
        self.files[self._name(path)] = _sha256(path)

    def remove_code_but(self, keep: set[Path]) -> None:
        """Removes our code zips other than `keep` (those of plugins replaced before)."""
        for name in [n for n in self.files if n.startswith(f"bin/{CODE_PREFIX}")]:
            path = self._path(name)
            if path in keep:
                continue
            if self.owns(path):
                path.unlink()
            del self.files[name]

    def save(self) -> None:
        tmp = self.path.with_name(f"{self.path.name}.tmp")
        tmp.write_text(json.dumps({"files": self.files}, indent=2, sort_keys=True) + "\n")
        _replace(tmp, self.path, 0o644)

    def uninstall(self) -> list[tuple[str, str]]:
        """Removes the listed files that are still as we wrote them, then the manifest."""
        outcomes = []
        for name in sorted(self.files):
            path = self._path(name)
            if not path.exists():
                outcomes.append((str(path), "already gone"))
            elif self.owns(path):
                path.unlink()
                outcomes.append((str(path), "removed"))
            else:
                outcomes.append((str(path), "changed since it was installed: left in place"))
        self.path.unlink(missing_ok=True)
        return outcomes


def find_plugin(name: str, bin_dir: Path, sources: list[Path],
                manifest: Manifest) -> tuple[Path | None, Path | None, str]:
    """Where reference plugin `name` will run from, and the source to copy into `bin_dir` (None:
    leave the bin dir as it is); with what to tell the operator."""
    target = bin_dir / name
    if target.exists() and not manifest.owns(target):
        return target, None, "present (not ours): left as it is"
    for source in sources:
        candidate = source / name
        if candidate.is_file() and os.access(candidate, os.X_OK) \
                and candidate.resolve() != target.resolve():
            return candidate, candidate, f"installed from {candidate}"
    if target.exists():
        return target, None, "present (ours; no source found to refresh it)"
    print(f"warning: plugin {name!r} not found in {', '.join(map(str, sources))}: runtimes "
          f"will fail until it is in {bin_dir}", file=sys.stderr)
    return None, None, "MISSING"


def copy_plugin(source: Path, target: Path, manifest: Manifest) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    _replace(tmp, target, 0o755)
    manifest.add(target)


def plugin_versions(executable: Path) -> list[str]:
    """The versions a CNI plugin says it supports (CNI_COMMAND=VERSION)."""
    try:
        out = subprocess.run([str(executable)], input=b'{"cniVersion": "0.1.0"}',
                             env={"CNI_COMMAND": "VERSION",
                                  "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                             capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:  # e.g. its interpreter does not exist
        raise SystemExit(f"{executable} cannot run: {exc}") from exc
    try:
        versions = json.loads(out.stdout)["supportedVersions"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{executable} did not answer VERSION (exit {out.returncode}): "
                         f"{(out.stdout + out.stderr).decode(errors='replace')[:500]}") from exc
    return [str(v) for v in versions]


def check_versions(conflist: Conflist, executables: list[Path]) -> None:
    """Each plugin must support the conflist's cniVersion: asked by exec'ing it (CNI VERSION),
    which for ours also proves that the pinned interpreter runs it."""
    for executable in executables:
        versions = plugin_versions(executable)
        if conflist.version not in versions:
            raise SystemExit(f"{conflist.path}: cniVersion {conflist.version} is not supported by "
                             f"{executable} (it supports {', '.join(versions)})")
