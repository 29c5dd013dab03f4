"""`python3 -m agent.install_cni` as an operator runs it on a node.

Plan:
- The plugin's interpreter is pinned by absolute path: with a PATH whose first `python3` is a
  different program, the installed plugin still runs (the pinned Python answers VERSION); the
  default is the installer's own interpreter; `--python` overrides it.
- loopback and the conflist's chained plugins are copied from the source dir; a plugin already in
  the bin dir (somebody else's) is never overwritten; `--uninstall` removes exactly the manifest's
  files, leaves others' files and a file changed since installation, and is idempotent.
- The conflist is checked before anything is written: a chained plugin that does not support its
  cniVersion, an unsupported cniVersion, a conflist that is not ours: exit with the reason, no
  file written. `--check` checks without installing.
- The shipped conflist (k8s/base/configmap.yaml) is the README's and installs with Debian's plugins.
- The plugin is a launcher script plus its code zip: an upgrade keeps the code the replaced
  launcher ran and removes older code; a launcher whose code is gone answers a CNI error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.install_files import code_of
from tests.helpers import conflist as shipped

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PLUGINS = Path("/usr/lib/cni")


def fake_plugin(path: Path, versions: list[str]) -> Path:
    """A stand-in reference plugin that answers VERSION (the installer's only call to it)."""
    answer = json.dumps({"cniVersion": "1.0.0", "supportedVersions": versions})
    path.write_text(f"#!/bin/sh\necho '{answer}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    dirs = {name: tmp_path / name for name in ("bin", "net.d", "src", "fakebin")}
    for d in dirs.values():
        d.mkdir()
    for name in ("loopback", "portmap", "tuning"):
        fake_plugin(dirs["src"] / name, ["0.3.1", "0.4.0", "1.0.0"])
    # The first python3 on the runtime's PATH: not a Python at all.
    impostor = dirs["fakebin"] / "python3"
    impostor.write_text("#!/bin/sh\necho impostor python3 ran >&2\nexit 97\n")
    impostor.chmod(0o755)
    return dirs


def write_conflist(node: dict[str, Path], version: str = "1.0.0",
                   chained: tuple[str, ...] = ("portmap",)) -> Path:
    data = {"cniVersion": version, "name": "vswitch",
            "plugins": [{"type": "vswitch-cni"}, *({"type": t} for t in chained)]}
    path = node["src"].parent / "10-vswitch.conflist"
    path.write_text(json.dumps(data))
    return path


def install(node: dict[str, Path], *extra: str, conflist: Path | None = None,
            source: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "agent.install_cni", f"--bin-dir={node['bin']}",
            f"--conf-dir={node['net.d']}", f"--plugin-source={source or node['src']}", *extra]
    if conflist is not None:
        argv.append(f"--conflist={conflist}")
    path = f"{node['fakebin']}:/usr/sbin:/usr/bin:/sbin:/bin"
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False,
                          env={"PATH": path, "PYTHONPATH": str(ROOT)})


def run_version(plugin: Path, node: dict[str, Path]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(plugin)], input=b'{"cniVersion": "1.0.0"}', capture_output=True,
                          check=False, env={"CNI_COMMAND": "VERSION",
                                            "PATH": f"{node['fakebin']}:/usr/bin:/bin"})


def shebang(path: Path) -> str:
    return path.read_bytes().split(b"\n", 1)[0].decode()


def test_the_pinned_interpreter_runs_whatever_python3_is_first_on_path(
    node: dict[str, Path],
) -> None:
    out = install(node, conflist=write_conflist(node))
    assert out.returncode == 0, out.stderr
    plugin = node["bin"] / "vswitch-cni"
    assert shebang(plugin) == f"#!{sys.executable} -IS"
    result = run_version(plugin, node)
    assert result.returncode == 0 and b"impostor" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["supportedVersions"][-1] == "1.1.0"
    # Through the PATH the runtime gives, `env python3` would have run the impostor.
    env_run = subprocess.run(["/usr/bin/env", "python3", "-c", "pass"], capture_output=True,
                             env={"PATH": f"{node['fakebin']}:/usr/bin"}, check=False)
    assert env_run.returncode == 97


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no /usr/bin/python3")
def test_python_flag_overrides_the_interpreter(node: dict[str, Path]) -> None:
    out = install(node, "--python=/usr/bin/python3", conflist=write_conflist(node))
    assert out.returncode == 0, out.stderr
    plugin = node["bin"] / "vswitch-cni"
    assert shebang(plugin) == "#!/usr/bin/python3 -IS"
    assert run_version(plugin, node).returncode == 0
    assert install(node, "--python=python3", conflist=write_conflist(node)).returncode != 0


def test_chained_plugins_and_loopback_are_installed_and_uninstalled(
    node: dict[str, Path],
) -> None:
    others = node["bin"] / "bridge", node["net.d"] / "99-other.conflist"
    for path in others:
        path.write_text("somebody else's\n")
    out = install(node, conflist=write_conflist(node, chained=("portmap", "tuning")))
    assert out.returncode == 0, out.stderr
    assert re.search(r"portmap: installed from .*src/portmap", out.stdout)
    for name in ("vswitch-cni", "portmap", "tuning", "loopback"):
        assert (node["bin"] / name).exists(), name
    assert (node["net.d"] / "10-vswitch.conflist").exists()
    # No manifest among the runtime's configs: runtimes load every .json/.conf in conf dirs.
    assert sorted(p.name for p in node["net.d"].iterdir()) == ["10-vswitch.conflist",
                                                               "99-other.conflist"]
    (node["bin"] / "tuning").write_text("changed by the operator\n")
    out = install(node, "--uninstall")
    assert out.returncode == 0, out.stderr
    assert "changed since it was installed: left in place" in out.stdout
    assert sorted(p.name for p in node["bin"].iterdir()) == ["bridge", "tuning"]
    assert sorted(p.name for p in node["net.d"].iterdir()) == ["99-other.conflist"]
    assert all(p.read_text() == "somebody else's\n" for p in others)
    again = install(node, "--uninstall")
    assert again.returncode == 0 and again.stdout == ""


def test_a_plugin_already_there_is_never_overwritten_nor_removed(node: dict[str, Path]) -> None:
    theirs = fake_plugin(node["bin"] / "portmap", ["0.4.0", "1.0.0"])
    before = theirs.read_bytes()
    out = install(node, conflist=write_conflist(node))
    assert out.returncode == 0, out.stderr
    assert "portmap: present (not ours): left as it is" in out.stdout
    assert theirs.read_bytes() == before
    assert install(node, "--uninstall").returncode == 0
    assert theirs.read_bytes() == before
    assert not (node["bin"] / "loopback").exists()


def test_reinstall_keeps_ownership_and_refreshes(node: dict[str, Path]) -> None:
    conflist = write_conflist(node)
    assert install(node, conflist=conflist).returncode == 0
    out = install(node, conflist=conflist)
    assert "portmap: installed from" in out.stdout, out.stdout
    assert install(node, "--uninstall").returncode == 0
    assert list(node["bin"].iterdir()) == []


@pytest.mark.parametrize(("version", "chained", "message"), [
    ("1.1.0", ("portmap",), "cniVersion 1.1.0 is not supported by"),
    ("0.9.0", (), "cniVersion '0.9.0' is not one vswitch-cni supports"),
])
def test_a_conflist_the_plugins_cannot_run_is_refused_before_writing(
    node: dict[str, Path], version: str, chained: tuple[str, ...], message: str,
) -> None:
    out = install(node, conflist=write_conflist(node, version, chained))
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert list(node["bin"].iterdir()) == [] and list(node["net.d"].iterdir()) == []


def test_a_conflist_that_is_not_ours_is_refused(node: dict[str, Path]) -> None:
    path = node["src"].parent / "x.conflist"
    path.write_text(json.dumps({"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}))
    out = install(node, conflist=path)
    assert "not a conflist with vswitch-cni as its first plugin" in out.stderr
    assert list(node["bin"].iterdir()) == []


def test_check_only_checks(node: dict[str, Path]) -> None:
    ok = install(node, "--check", conflist=write_conflist(node))
    assert ok.returncode == 0 and "supports cniVersion 1.0.0" in ok.stdout, ok.stderr
    bad = install(node, "--check", conflist=write_conflist(node, "1.1.0"))
    assert bad.returncode != 0 and "src/portmap" in bad.stderr
    assert list(node["bin"].iterdir()) == []


@pytest.mark.parametrize("doc", ["README.md", "docs/install.md"])
def test_the_docs_show_the_shipped_conflist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    block = re.search(r"10-vswitch\.conflist`.*?```json\n(.*?)```", text, re.S)
    assert block is not None
    assert json.loads(block.group(1)) == shipped.shipped()
    assert shipped.shipped()["cniVersion"] == "1.0.0"


@pytest.mark.skipif(not (DEBIAN_PLUGINS / "portmap").exists(),
                    reason=f"no reference plugins in {DEBIAN_PLUGINS} (Debian containernetworking-"
                           "plugins)")
def test_the_shipped_conflist_installs_with_debians_plugins(node: dict[str, Path]) -> None:
    path = node["src"].parent / shipped.NAME
    path.write_text(shipped.shipped_text())
    out = install(node, conflist=path, source=DEBIAN_PLUGINS)
    assert out.returncode == 0, out.stderr
    assert f"portmap: installed from {DEBIAN_PLUGINS}/portmap" in out.stdout
    assert f"loopback: installed from {DEBIAN_PLUGINS}/loopback" in out.stdout


def test_uninstall_on_the_node_of_what_an_init_container_installed(node: dict[str, Path]) -> None:
    """The init container sees the node's dirs under /host; the operator uninstalls without."""
    host = node["bin"].parent / "host"
    host.symlink_to(node["bin"].parent)
    conflist = write_conflist(node)
    argv = [sys.executable, "-m", "agent.install_cni", f"--bin-dir={host / 'bin'}",
            f"--conf-dir={host / 'net.d'}", f"--plugin-source={node['src']}",
            f"--conflist={conflist}"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr
    assert str(host) not in (node["bin"] / ".vswitch-cni.installed").read_text()
    assert install(node, "--uninstall").returncode == 0
    assert list(node["bin"].iterdir()) == [] and list(node["net.d"].iterdir()) == []


def test_without_conflist_the_shipped_one_is_installed(node: dict[str, Path]) -> None:
    out = install(node)
    assert out.returncode == 0, out.stderr
    installed = json.loads((node["net.d"] / shipped.NAME).read_text())
    assert installed == shipped.shipped()


def test_an_interpreter_that_cannot_run_the_plugin_is_reported(node: dict[str, Path]) -> None:
    impostor = node["fakebin"] / "python3"
    out = install(node, f"--python={impostor}", conflist=write_conflist(node))
    assert out.returncode != 0 and "did not answer VERSION (exit 97)" in out.stderr, out.stderr
    assert list(node["bin"].iterdir()) == [] and list(node["net.d"].iterdir()) == []


def code_zips(node: dict[str, Path]) -> list[Path]:
    return sorted(node["bin"].glob(".vswitch-cni-code-*.pyz"))


def test_upgrades_keep_the_code_a_running_plugin_may_read_and_no_more(
    node: dict[str, Path],
) -> None:
    """The plugin is a launcher plus its code zip (named by content). An install keeps the code
    the replaced launcher ran (a plugin exec'd a moment before may still be reading it) and
    removes older ones; uninstall removes them all."""
    conflist = write_conflist(node)
    launched = []
    for _ in range(3):
        assert install(node, conflist=conflist).returncode == 0
        launched.append(code_of(node["bin"] / "vswitch-cni"))
        assert run_version(node["bin"] / "vswitch-cni", node).returncode == 0
    assert launched[-1] is not None and launched[-1].exists()
    assert set(code_zips(node)) <= {p for p in launched[-2:] if p is not None}
    assert launched[-1] in code_zips(node) and len(code_zips(node)) <= 2
    assert install(node, "--uninstall").returncode == 0
    assert list(node["bin"].iterdir()) == []


def test_a_launcher_without_its_code_answers_a_cni_error(node: dict[str, Path]) -> None:
    assert install(node, conflist=write_conflist(node)).returncode == 0
    for path in code_zips(node):
        path.unlink()
    out = run_version(node["bin"] / "vswitch-cni", node)
    assert out.returncode == 1
    error = json.loads(out.stdout)
    assert error["code"] == 999 and "reinstall" in error["msg"], error
