"""The libcni driver itself: its build cache and its answers to a bad command line.

Test plan:
- build_driver returns the same binary on a second call without rebuilding it (same inode and
  mtime), and names the binary after a digest of the source it was built from.
- Bad command lines exit 2 with a JSON error naming the offending verb or flag, never a Go panic:
  unknown verb, missing --conflist, malformed --args, malformed --valid-attachments, unknown
  --gc-key. A conflist file that does not exist exits 1 with libcni's error (code 0: no plugin ran).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.libcni import DEFAULT_BUILD_DIR, Libcni, build_driver


@pytest.fixture
def driver_lib(libcni_driver: Path, reference_plugins: Path, libcni_cache: Path) -> Libcni:
    return Libcni(libcni_driver, [reference_plugins], libcni_cache)


@pytest.fixture
def conflist_file(tmp_path: Path) -> Path:
    path = tmp_path / "net.conflist"
    path.write_text('{"cniVersion": "1.1.0", "name": "drv", "plugins": [{"type": "bridge"}]}')
    return path


def test_build_is_cached(libcni_driver: Path) -> None:
    before = libcni_driver.stat()
    again = build_driver(DEFAULT_BUILD_DIR)
    assert again == libcni_driver
    after = again.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize(
    ("verb", "flags", "names"),
    [
        ("frobnicate", [], "frobnicate"),
        ("add", ["--container-id", "c1"], "--conflist"),
        ("add", ["--conflist", "{conflist}", "--args", "K8S_POD_NAME"], "--args"),
        ("gc", ["--conflist", "{conflist}", "--valid-attachments", "[{"], "--valid-attachments"),
        ("gc", ["--conflist", "{conflist}", "--gc-key", "some"], "--gc-key"),
        ("add", ["--no-such-flag"], "no-such-flag"),
    ],
)
def test_bad_command_line_exits_2_naming_the_flag(
    verb: str, flags: list[str], names: str, driver_lib: Libcni, conflist_file: Path,
) -> None:
    rc, out = driver_lib.run(verb, [f.replace("{conflist}", str(conflist_file)) for f in flags])
    assert rc == 2, out
    assert names in out["error"] and out["code"] == 0, out
    assert "panic" not in out.get("stderr", ""), out


def test_missing_conflist_file_is_a_libcni_error(driver_lib: Libcni, tmp_path: Path) -> None:
    rc, out = driver_lib.status(tmp_path / "absent.conflist")
    assert rc == 1 and out["code"] == 0, out
    assert "absent.conflist" in out["error"], out
