"""A container image built here from Debian's busybox-static: no registry is reachable.

One root filesystem serves as the sandbox ("pause") image and as the pods' workload: the static
`/bin/busybox` (sleep as the pause process, httpd to serve, nc and ping as clients) and a page at
/www/index.html whose text the tests expect back. `rootfs_tar` is what `podman import` takes;
`docker_archive` wraps it as a one-layer image archive with a name, which `ctr images import`
takes.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
PAGE = "served by a vswitch-cni pod\n"
PAUSE = ["/bin/busybox", "sleep", "2147483647"]
HTTPD = ["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]


def busybox_static() -> Path | None:
    """Debian's busybox-static (the dynamic busybox would need its libraries in the image)."""
    path = shutil.which("busybox") or str(BUSYBOX)
    if not Path(path).exists():
        return None
    head = Path(path).read_bytes()[:4096]
    # A dynamically linked ELF names its loader in a PT_INTERP segment.
    return None if b"ld-linux" in head or b"/lib64/ld" in head else Path(path)


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o755,
         link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif data is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def rootfs_tar(target: Path) -> Path:
    busybox = busybox_static()
    assert busybox is not None, "busybox-static is not installed"
    with tarfile.open(target, "w") as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "www", "var", "run"):
            _add(tar, d)
        _add(tar, "bin/busybox", busybox.read_bytes())
        _add(tar, "bin/sh", link="busybox")
        _add(tar, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644)
        _add(tar, "etc/group", b"root:x:0:\n", 0o644)
        _add(tar, "www/index.html", PAGE.encode(), 0o644)
    return target


def _architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def docker_archive(target: Path, name: str) -> Path:
    """A docker-archive image `name` (registry/repo:tag) of one layer, entrypoint the pause."""
    layer = rootfs_tar(target.with_suffix(".layer.tar")).read_bytes()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": _architecture(), "os": "linux",
        "config": {"Entrypoint": PAUSE, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name],
                            "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(target, "w") as tar:
        _add(tar, "layer.tar", layer, 0o644)
        _add(tar, config_name, config, 0o644)
        _add(tar, "manifest.json", manifest, 0o644)
    target.with_suffix(".layer.tar").unlink()
    return target
