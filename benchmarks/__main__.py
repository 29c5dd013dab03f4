"""The one way in to the benchmarks.

    python -m benchmarks list                        every benchmark, one line each
    python -m benchmarks run NAME [--quick] [ARGS]   one benchmark (ARGS go to its module)
    python -m benchmarks run --all [--quick]         the suite (`make bench`)
    python -m benchmarks report [--out FILE]         BENCHMARKS.md's headline and status lines

Full runs write their sections into BENCHMARKS.md (or --out) and then its headline. Quick runs
are smoke runs with tiny counts: they write into a temporary file (or --out, never the
repository's BENCHMARKS.md), headline included. Each benchmark runs as its own process, from the
checkout, as `python -m MODULE`; one that needs what the machine lacks (a VPP, a kube-apiserver:
the environment variable that names it) is skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.core.catalog import CATALOG, Benchmark, find
from benchmarks.core.front import refresh
from benchmarks.core.harness import REPO

DEFAULT_OUT = REPO / "BENCHMARKS.md"


def _list() -> int:
    width = max(len(b.name) for b in CATALOG)
    for b in CATALOG:
        needs = f" [needs {b.needs}]" if b.needs else ""
        suite = "" if b.in_suite else " (not in --all)"
        print(f"{b.name:<{width}}  {b.room:<7}  {b.summary}{needs}{suite}")
    return 0


def _missing(bench: Benchmark) -> str:
    if bench.env and not os.environ.get(bench.env):
        return f"needs {bench.needs}: {bench.env} is not set"
    return ""


def _run_one(bench: Benchmark, quick: bool, out: Path, extra: list[str]) -> int:
    if quick and bench.quick is None:
        print(f"[benchmarks] {bench.name}: no quick mode, skipped", file=sys.stderr)
        return 0
    args = [*(bench.quick or ()), *extra] if quick else list(extra)
    if bench.section:  # relative within the checkout: the command the section records
        where = out.resolve()
        args += ["--out", str(where.relative_to(REPO) if where.is_relative_to(REPO) else where)]
    command = [sys.executable, "-m", bench.module, *args]
    print(f"[benchmarks] {bench.name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    rc = subprocess.run(command, cwd=REPO, check=False).returncode
    print(f"[benchmarks] {bench.name}: exit {rc} after {time.monotonic() - started:.0f} s",
          file=sys.stderr, flush=True)
    return rc


def _run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    out: Path | None = args.out
    if out is None:
        out = (Path(tempfile.mkdtemp(prefix="benchmarks-quick-")) / "BENCHMARKS.md"
               if args.quick else DEFAULT_OUT)
    if args.quick and out.resolve() == DEFAULT_OUT.resolve():
        parser.error("quick-mode numbers must not replace BENCHMARKS.md; pick another --out")
    if args.all == bool(args.name):
        parser.error("name one benchmark, or --all")
    if args.all and extra:
        parser.error(f"arguments for one benchmark with --all: {extra}")
    try:
        chosen = [b for b in CATALOG if b.in_suite] if args.all else [find(args.name)]
    except KeyError as err:
        parser.error(str(err.args[0]))
    failed = []
    for bench in chosen:
        why = _missing(bench)
        if why:
            print(f"[benchmarks] {bench.name}: skipped, {why}", file=sys.stderr)
            continue
        if _run_one(bench, args.quick, out, extra) != 0:
            failed.append(bench.name)
    if out.exists():
        refresh(out)
        print(out)
    if failed:
        print(f"[benchmarks] failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every benchmark, one line each")
    run = sub.add_parser("run", help="one benchmark, or --all")
    run.add_argument("name", nargs="?", help="a name from `list`")
    run.add_argument("--all", action="store_true", help="every benchmark of the suite")
    run.add_argument("--quick", action="store_true", help="smoke run: tiny counts, temp output")
    run.add_argument("--out", type=Path, help="the markdown file (default BENCHMARKS.md; "
                     "quick: a temporary one)")
    report = sub.add_parser("report", help="rewrite the headline and the status lines")
    report.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args, extra = parser.parse_known_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "report":
        refresh(args.out)
        return 0
    if args.command == "run":
        if os.geteuid() != 0:
            parser.error("needs root: the benchmarks create network namespaces and links")
        return _run(args, extra, parser)
    parser.error(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
