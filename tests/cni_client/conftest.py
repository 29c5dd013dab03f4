"""Fixtures for the plugin's tests: a scripted grpcio agent and a short private temp directory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.cni_client.scripted_agent import ScriptedAgent, scripted_agent, short_tmpdir


@pytest.fixture
def agent() -> Iterator[ScriptedAgent]:
    with scripted_agent() as running:
        yield running


@pytest.fixture
def short_dir() -> Iterator[str]:
    directory = short_tmpdir()
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
