"""Fixtures of the CNI conformance suites: the libcni driver, plugin dirs and network namespaces.

The driver is built once per session into testbed/libcni/bin/ (git-ignored, keyed by a digest of its
source, so later sessions reuse it). A missing Go toolchain or libcni source fails every test of
the suite with the install hint: CI installs them, and a silently skipped conformance suite would
hide a broken plugin.

Everything a test creates (namespaces, bin dirs, caches) carries the pid and a random suffix,
because other suites run on this machine at the same time, and is removed in `finally` blocks so
that a failing test leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyroute2 import netns

from testbed.libcni import (
    DEFAULT_BUILD_DIR,
    REFERENCE_PLUGINS,
    Libcni,
    LibcniUnavailable,
    build_driver,
    unique,
)

NETNS_DIR = Path("/run/netns")


@pytest.fixture(scope="session")
def libcni_driver() -> Path:
    """The built driver binary; fails (never skips) when Go or libcni is missing."""
    try:
        return build_driver(DEFAULT_BUILD_DIR)
    except LibcniUnavailable as exc:
        pytest.fail(f"libcni conformance harness unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def reference_plugins() -> Path:
    """The directory holding the reference CNI plugins 1.9.1."""
    if not (REFERENCE_PLUGINS / "bridge").exists():
        pytest.fail(f"reference plugins missing in {REFERENCE_PLUGINS}: run .ci/install-system",
                    pytrace=False)
    return REFERENCE_PLUGINS


@pytest.fixture
def netns_factory() -> Iterator[Callable[[], Path]]:
    """Factory of fresh named network namespaces; all are removed when the test ends."""
    created: list[str] = []

    def make() -> Path:
        name = unique("vsc-conf-")
        netns.create(name)
        created.append(name)
        return NETNS_DIR / name

    try:
        yield make
    finally:
        for name in created:
            # A namespace still referenced by a leaked process survives removal of its mount:
            # the kernel then frees it with its interfaces once that process exits.
            netns.remove(name)


@pytest.fixture
def libcni_cache(tmp_path: Path) -> Path:
    """A private libcni result cache: CHECK, DEL and GC of one test never see another's."""
    path = tmp_path / "libcni-cache"
    path.mkdir()
    return path


@pytest.fixture
def reference_libcni(
    libcni_driver: Path, reference_plugins: Path, libcni_cache: Path,
    netns_factory: Callable[[], Path],
) -> Libcni:
    """libcni over the reference plugins, run inside its own 'host' namespace.

    Bridges and host-side veth ends then live in a namespace the test owns, never on the machine.
    """
    return Libcni(libcni_driver, [reference_plugins], libcni_cache, netns_path=netns_factory())
