"""A VPP that stops answering in the middle of a soak (benchmarks/soak): the sample says so
instead of failing the run, and the run ends there with a note rather than churning on against
a dead vswitch. (VPP 26.06 can stop answering for good: docs/vpp.md, "A livelock of VPP's".)

Test plan:
- a probe whose VPP answers the control ping and then no more: the VPP sample is
  `vpp_answers: 0` and nothing else, no exception;
- a run whose last sample has `vpp_answers: 0` is over, with one note naming the cycle, however
  often it is asked; a run whose VPP answered (or that has no VPP) goes on.
"""

from __future__ import annotations

from typing import Any

from agent.model.errors import TryAgainLater
from benchmarks.soak import sample
from benchmarks.soak.churn import Churn
from benchmarks.soak.report import DataplaneRun, Window


class _StopsAfterPing:
    """What testbed.vpp.VppProbe is to the sample, for a VPP gone silent after the ping."""

    def ping_ms(self) -> float:
        return 0.2

    def __getattr__(self, name: str) -> Any:
        def silent(*args: Any) -> Any:
            raise TryAgainLater("lost the connection to VPP during cli_inband", "timed out")
        return silent


def _owned() -> sample.Owned:
    empty: frozenset[str] = frozenset()
    return sample.Owned(live_links=empty, dead_links=empty, live_tags=empty,
                             dead_tags=empty, live_addresses=empty, dead_addresses=empty,
                             pod_subnet="10.1.0.0/16")


def test_a_vpp_silent_after_its_ping_makes_a_silent_sample() -> None:
    got = sample.vpp(_StopsAfterPing(), _owned(), 0, 1)  # type: ignore[arg-type]
    assert got == {"vpp_answers": 0.0}


def _churn(*answers: float) -> tuple[Churn, list[str]]:
    logged: list[str] = []
    churn = Churn.__new__(Churn)  # only what _vpp_gone reads
    churn.dataplane, churn.log = "vpp", logged.append
    churn.result = DataplaneRun(dataplane="vpp", pods=2, window=5)
    churn.result.windows = [Window(cycle=5 * i, seconds=0.0, load1="", add_ms=[], del_ms=[],
                                   failures=0, values={"vpp_answers": a})
                            for i, a in enumerate(answers)]
    return churn, logged


def test_the_run_ends_at_the_first_silent_sample_with_one_note() -> None:
    churn, logged = _churn(1.0, 0.0)
    assert churn._vpp_gone() and churn._vpp_gone()
    assert churn.result.details == [
        "VPP stopped answering its API (sample at cycle 5): the run ends there"]
    assert logged == ["vpp: " + churn.result.details[0]]
    assert churn.result.vpp_silent == 1


def test_a_run_whose_vpp_answers_goes_on() -> None:
    assert not _churn(0.0, 1.0)[0]._vpp_gone()  # answered again at the last sample
    kernel, _ = _churn()
    kernel.result.windows = [Window(cycle=0, seconds=0.0, load1="", add_ms=[], del_ms=[],
                                    failures=0, values={"agent_rss_kib": 1.0})]
    assert not kernel._vpp_gone()
    assert not _churn()[0]._vpp_gone()  # no sample yet
