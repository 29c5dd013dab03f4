"""The CNI socket's start-up rules: replace a stale socket, never a live one or a plain file.

Plan: a socket file nobody listens on is removed; a socket somebody listens on stops start-up;
a regular file at the path stops start-up and is left alone; a missing directory is created.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent.app.agent import StartupError, prepare_socket


def test_stale_socket_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "cni.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    prepare_socket(str(path))
    assert not path.exists()


def test_live_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cni.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen(1)
    try:
        with pytest.raises(StartupError, match="another agent"):
            prepare_socket(str(path))
        assert path.exists()
    finally:
        live.close()


def test_regular_file_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "cni.sock"
    path.write_text("not a socket")
    with pytest.raises(StartupError, match="not a socket"):
        prepare_socket(str(path))
    assert path.read_text() == "not a socket"


def test_missing_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "run" / "vswitch" / "cni.sock"
    prepare_socket(str(path))
    assert path.parent.is_dir()
