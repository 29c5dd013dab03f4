"""Installs the plugin and the network config on a node, and removes them again.

Used by the DaemonSet's init container and, the same command, on a node without Kubernetes
(docs/install.md). The plugin is stdlib-only Python, installed as its code zip beside a
launcher script `<bin-dir>/vswitch-cni` whose shebang names an interpreter chosen here, by
absolute path: a runtime's PATH (a pyenv shim, a virtualenv) then never decides which Python runs
each CNI call.

Runtimes look for every plugin of a conflist, and for `loopback`, in their one bin dir, so the
reference plugins the conflist chains (and loopback) are copied there from a source dir when they
are missing. A file that is already there belongs to someone else and is never overwritten or
deleted. What this installer wrote is listed in a manifest in the bin dir, so `--uninstall`
removes exactly that (and leaves a file alone that was changed since). Every file is written to a
temporary name and renamed into place: a runtime exec'ing a plugin never sees half a file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agent.install_files import (
    DEFAULT_CONFLIST_NAME,
    DEFAULT_SOURCES,
    MANIFEST,
    SHEBANG_FLAGS,
    Conflist,
    Manifest,
    build_plugin,
    check_versions,
    code_of,
    copy_plugin,
    find_plugin,
    install_conflist,
    read_conflist,
)

__all__ = ["build_plugin", "install_conflist", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="install-cni", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin-dir", type=Path, required=True, help="the runtime's CNI bin dir")
    parser.add_argument("--conf-dir", type=Path, required=True,
                        help="the runtime's CNI config dir")
    parser.add_argument("--conflist", type=Path,
                        help="the network config to install (default: the shipped "
                             f"{DEFAULT_CONFLIST_NAME}, cniVersion 1.0.0, portmap chained)")
    parser.add_argument("--python", default=sys.executable,
                        help="absolute path of the interpreter that runs the plugin on the node "
                             "(default: the one running this installer, %(default)s)")
    parser.add_argument("--plugin-source", type=Path, action="append", default=None,
                        help="where to find loopback and chained reference plugins "
                             f"(repeatable; default: {', '.join(map(str, DEFAULT_SOURCES))})")
    parser.add_argument("--check", action="store_true",
                        help="only check the conflist against the plugins' supported versions")
    parser.add_argument("--uninstall", action="store_true",
                        help=f"remove exactly what the manifest {MANIFEST} lists")
    return parser


def _plugins(args: argparse.Namespace, conflist: Conflist,
             manifest: Manifest) -> list[tuple[str, Path | None, Path | None, str]]:
    """(name, where it will run from, source to copy or None, message) per plugin needed."""
    sources = args.plugin_source or list(DEFAULT_SOURCES)
    found = []
    chained = conflist.chained_types()
    for name in chained + ["loopback"] * ("loopback" not in chained):
        found.append((name, *find_plugin(name, args.bin_dir, sources, manifest)))
    return found


def check(args: argparse.Namespace) -> int:
    """Checks a conflist against what the installed (or installable) plugins support."""
    conflist = read_conflist(args.conflist)
    plugins = _plugins(args, conflist, Manifest.load(args.bin_dir, args.conf_dir))
    ours = args.bin_dir / "vswitch-cni"
    check_versions(conflist, [ours] * ours.exists()
                   + [run for name, run, _, _ in plugins if run and name != "loopback"])
    print(f"{conflist.path}: every plugin supports cniVersion {conflist.version}")
    return 0


def install(args: argparse.Namespace) -> int:
    conflist = read_conflist(args.conflist)
    if not Path(args.python).is_absolute():
        raise SystemExit(f"--python must be an absolute path, not {args.python!r}")
    manifest = Manifest.load(args.bin_dir, args.conf_dir)
    plugins = _plugins(args, conflist, manifest)
    # Refuse before writing anything: a chained plugin that cannot take this cniVersion, or an
    # interpreter that cannot run ours, would fail every pod.
    check_versions(conflist, [run for name, run, _, _ in plugins if run and name != "loopback"])
    plugin = args.bin_dir / "vswitch-cni"
    candidate = args.bin_dir / ".vswitch-cni.candidate"
    # The code the running launcher names stays until the next install: a plugin exec'd just
    # before the launcher is replaced may still be reading it.
    previous = code_of(plugin) if manifest.owns(plugin) else None
    code = build_plugin(candidate, interpreter=f"{args.python} {SHEBANG_FLAGS}")
    try:
        # The interpreter is a path of the node; in an init container it may be absent here.
        if Path(args.python).exists():
            check_versions(conflist, [candidate])
        os.replace(candidate, plugin)
    except BaseException:
        if code != previous:
            code.unlink(missing_ok=True)
        raise
    finally:
        candidate.unlink(missing_ok=True)
    manifest.add(plugin)
    manifest.add(code)
    manifest.remove_code_but({code} | ({previous} if previous else set()))
    for name, _, source, message in plugins:
        if source is not None:
            copy_plugin(source, args.bin_dir / name, manifest)
        print(f"{name}: {message}")
    manifest.add(install_conflist(conflist, args.conf_dir))
    manifest.save()
    print(f"installed {plugin} (run by {args.python}) and {args.conf_dir / conflist.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.uninstall:
        for path, outcome in Manifest.load(args.bin_dir, args.conf_dir).uninstall():
            print(f"{path}: {outcome}")
        return 0
    return check(args) if args.check else install(args)


if __name__ == "__main__":
    sys.exit(main())
