"""Where the project's own programs are, without looking on PATH.

The console scripts (`vswitch-cni`, `vswitch-agent`, `vswitchctl`) are installed by `make setup`
into the project's virtual environment, beside its interpreter (`.venv/bin`). A new user's PATH
holds none of them, and a PATH that does (a global pip install, a version manager's shim) may hold
another checkout's: so the test bed takes them from the directory of the interpreter running it,
or from `VSWITCH_BIN_DIR` when the operator names another installation, and never from PATH.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN_DIR_ENV = "VSWITCH_BIN_DIR"
SETUP_HINT = "run `make setup` and use the project's interpreter (.venv/bin/python)"


class NotInstalled(RuntimeError):
    """A program of the project is not where the test bed looks for it."""


def bin_dir() -> Path:
    """`VSWITCH_BIN_DIR`, else the running interpreter's directory (not resolved: a venv's
    python is a symlink to the system's, and its scripts are beside the link)."""
    explicit = os.environ.get(BIN_DIR_ENV)
    return Path(explicit) if explicit else Path(sys.executable).parent


def executable(name: str) -> Path:
    """The installed console script `name`; NotInstalled says where it looked and what to do."""
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        where = (f"{BIN_DIR_ENV}={os.environ[BIN_DIR_ENV]}" if BIN_DIR_ENV in os.environ
                 else f"{path.parent}, beside {sys.executable}")
        raise NotInstalled(f"{name} is not installed in {where}: {SETUP_HINT}, "
                           f"or set {BIN_DIR_ENV} to the directory that holds it")
    return path


def plugin() -> Path:
    """The `vswitch-cni` plugin executable, exec'd the way a runtime execs it."""
    return executable("vswitch-cni")
