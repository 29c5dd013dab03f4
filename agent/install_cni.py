"""Installs the plugin and the network config on a node (the DaemonSet's init container).

The plugin is stdlib-only Python, so it is installed as one self-contained zipapp
`<bin-dir>/vswitch-cni` run by the host's `python3`. Both files are written to a temporary name
and renamed into place, so a runtime exec'ing the plugin while it is replaced never sees half a
file.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import py_compile
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

import cni_client


def build_plugin(target: Path) -> None:
    """Writes the plugin zipapp to `target` atomically, mode 0755."""
    source = Path(cni_client.__file__).resolve().parent
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
        tmp = target.with_name(f".{target.name}.tmp")
        zipapp.create_archive(stage, tmp, interpreter="/usr/bin/env python3",
                              main="cni_client.main:main")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)


def install_conflist(source: Path, conf_dir: Path) -> Path:
    """Copies the network config after checking it is a conflist whose first plugin is ours."""
    data = json.loads(source.read_text())
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not plugins or plugins[0].get("type") != "vswitch-cni":
        raise SystemExit(f"{source}: not a conflist with vswitch-cni as its first plugin")
    target = conf_dir / source.name
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install-cni", description=__doc__)
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--conf-dir", type=Path, required=True)
    parser.add_argument("--conflist", type=Path, required=True)
    args = parser.parse_args(argv)
    build_plugin(args.bin_dir / "vswitch-cni")
    conf = install_conflist(args.conflist, args.conf_dir)
    print(f"installed {args.bin_dir / 'vswitch-cni'} and {conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
