"""Placement on its own, in memory (schedulers/placement.py): built with the tables and
sinks the book gives it, it places, queues, holds for the ledger and hands what can never
run to ``failing``, answering nothing itself."""

from __future__ import annotations

from collections import deque

from tests.schedulers.test_book import A, B, Clock
from zpar.errors import ImpossibleDependency, TaskCancelled
from zpar.schedulers.instructions import SendTask
from zpar.schedulers.ledger import OpenLedger
from zpar.schedulers.placement import Placement
from zpar.schedulers.schemes import EngineSlot, leastload
from zpar.schedulers.state import HELD, QUEUED, RUNNING, Task
from zpar.wire.messages import ReplyStatus


class Ledger(OpenLedger):
    __slots__ = ("refused", "gone")

    def __init__(self) -> None:
        self.refused: set[bytes] = set()
        self.gone: set[bytes] = set()

    def admit(self, client: bytes) -> bool:
        return client not in self.refused and client not in self.gone

    def is_gone(self, client: bytes) -> bool:
        return client in self.gone


def placement(ledger=None, depth: int = 1):
    engines = {u: EngineSlot(i, u, joined=Clock().now, depth=depth) for i, u in enumerate((A, B))}
    out: list = []
    failing: deque = deque()
    part = Placement(engines, leastload, ledger or OpenLedger(), Clock(), out, failing)
    return part, engines, out, failing


def task(msg_id: str, client: bytes = b"client", targets=None) -> Task:
    return Task(msg_id, client, None, targets)


def test_places_where_there_is_room_and_queues_the_rest_in_order():
    part, engines, out, _ = placement()
    tasks = [task(f"t{n}") for n in range(4)]
    for t in tasks:
        part.submit(t)
    assert [(i.task.msg_id, i.engine.uuid) for i in out] == [("t0", A), ("t1", B)]
    assert [t.msg_id for t in part.queue] == ["t2", "t3"] and tasks[2].state == QUEUED
    part.unplace(tasks[0], engines[A])  # came back unstarted: A has room again
    part.drain()
    assert isinstance(out[-1], SendTask) and out[-1].task is tasks[2]
    assert tasks[2].state == RUNNING and [t.msg_id for t in part.queue] == ["t3"]


def test_a_task_whose_targets_are_gone_goes_to_failing_not_answered():
    part, engines, out, failing = placement()
    t = task("t", targets=frozenset({b"gone"}))
    part.submit(t)
    ((failed, error, why, status),) = failing
    assert failed is t and error is ImpossibleDependency and "target engines" in why
    assert status == ReplyStatus.ERROR and not out and not part.restricted


def test_the_ledger_holds_a_clients_tasks_and_release_places_them_in_order():
    ledger = Ledger()
    part, _, out, _ = placement(ledger)
    ledger.refused.add(b"slow")
    first, second = task("s1", b"slow"), task("s2", b"slow")
    part.submit(first)
    part.submit(second)
    assert first.state == second.state == HELD and not out
    ledger.refused.clear()
    part.release(b"slow")
    assert [i.task.msg_id for i in out] == ["s1", "s2"] and not part.held


def test_a_gone_clients_task_goes_to_failing_as_cancelled():
    ledger = Ledger()
    part, _, out, failing = placement(ledger)
    ledger.gone.add(b"gone")
    part.submit(task("g", b"gone"))
    ((_, error, _, status),) = failing
    assert error is TaskCancelled and status == ReplyStatus.CANCELLED and not out


def test_an_engine_not_connected_yet_is_paused_then_tried_again():
    part, engines, out, _ = placement()
    assert part.not_connected_yet(engines[A])
    part.submit(task("t0"))
    part.submit(task("t1"))
    assert [i.engine.uuid for i in out] == [B] and part.paused == {A}
    part.unpause()
    assert [i.engine.uuid for i in out] == [B, A] and not part.paused
