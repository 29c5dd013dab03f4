"""agent/linux/rcu: reading and turning on the kernel's expedited RCU grace periods.

The knob's logic against files standing in for it (the real one is machine-wide; the agent
process test in tests/vpp/test_agent_vpp_process.py writes it and restores it): a knob at 0 is
written 1, one at 1 is left alone, one that cannot be written is reported, not raised.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from agent.linux import rcu


def test_a_knob_at_0_is_turned_on(tmp_path: Path) -> None:
    knob = tmp_path / "rcu_expedited"
    knob.write_text("0\n")
    assert not rcu.expedited(str(knob))
    assert rcu.expedite(str(knob))
    assert knob.read_text().strip() == "1" and rcu.expedited(str(knob))


def test_a_knob_already_on_is_not_written(tmp_path: Path) -> None:
    knob = tmp_path / "rcu_expedited"
    knob.write_text(" 1\n")  # a write of "1" would leave "11\n"
    assert rcu.expedite(str(knob))
    assert knob.read_text() == " 1\n"


def test_no_knob_means_normal_grace_periods_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(tmp_path / "no-such-knob")
    assert not rcu.expedited(missing)
    with caplog.at_level(logging.WARNING, logger="agent.linux.rcu"):
        assert not rcu.expedite(missing)
    assert "ExpediteKernelRcu: cannot write" in caplog.text and missing in caplog.text
    assert not os.path.exists(missing)  # not created: the kernel has no such knob
