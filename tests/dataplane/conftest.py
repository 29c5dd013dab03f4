"""Fixtures for the dataplane tests: real namespaces, created per test and always removed.

The tests import `tests.helpers`; the repository root is put on sys.path here so that a plain
`pytest` run finds it too (the editable install maps only the product packages).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.helpers.netns import entered, named_netns  # noqa: E402


@pytest.fixture
def node_ns() -> Iterator[str]:
    """A node namespace that the test thread is inside for the whole test."""
    with named_netns("tnode") as path, entered(path):
        yield path


@pytest.fixture
def pod_netns() -> Iterator[str]:
    with named_netns("tpod") as path:
        yield path
