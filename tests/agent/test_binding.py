"""The node ID binding guard (agent/state/id_guard), against a scripted store and a recording pod
manager: what it refuses, when it writes records back, and that a failed write-back is retried.

Plan: intact binding -> nothing; held by another node -> ADDs refused naming the holder, records
untouched; back -> records written back, ADDs taken again; re-created -> records written back,
and a write-back that meets an unreachable etcd is tried again at the next check.
"""

from __future__ import annotations

from agent.model.errors import TryAgainLater
from agent.state.id_bindings import Binding
from agent.state.id_guard import BindingGuard


class ScriptedStore:
    def __init__(self, *answers: tuple[str, bool]) -> None:
        self.answers = [Binding(holder=h, rewritten=w) for h, w in answers]

    def bind_node_id(self, node_name: str, node_id: int) -> Binding:
        return self.answers.pop(0)


class RecordingPods:
    def __init__(self, failures: int = 0) -> None:
        self.refusing = ""
        self.restores = 0
        self.failures = failures

    def refuse_adds(self, reason: str) -> None:
        self.refusing = reason

    def restore_records(self) -> list[str]:
        if self.failures:
            self.failures -= 1
            raise TryAgainLater("etcd is unreachable (list pods)", "no answer")
        self.restores += 1
        return ["c1/eth0"]


def test_a_binding_held_by_another_node_refuses_adds_until_it_is_back() -> None:
    pods = RecordingPods()
    guard = BindingGuard(ScriptedStore(("", False), ("other", False), ("", True)), "a", 1, pods)
    guard.check()
    assert pods.refusing == "" and pods.restores == 0 and not guard.lost
    guard.check()
    assert "held by node other" in pods.refusing and guard.lost == pods.refusing
    assert pods.restores == 0
    guard.check()
    assert pods.refusing == "" and not guard.lost and pods.restores == 1


def test_a_failed_write_back_is_tried_again() -> None:
    pods = RecordingPods(failures=1)
    guard = BindingGuard(ScriptedStore(("", True), ("", False), ("", False)), "a", 1, pods)
    guard.check()
    assert pods.restores == 0
    guard.check()
    assert pods.restores == 1
    guard.check()
    assert pods.restores == 1  # written back once; an intact binding needs nothing more


def test_a_binding_an_operator_deleted_is_never_written_again() -> None:
    pods = RecordingPods()
    store = ScriptedStore()
    store.answers = [Binding(removed=True), Binding(removed=True)]
    guard = BindingGuard(store, "a", 1, pods)
    guard.check()
    guard.check()
    assert "removed from the cluster" in pods.refusing and pods.restores == 0
