"""Gates on its own, in memory (schedulers/gating.py): a request's flags read into a
verdict (place it, it waits, or why it never can), timeouts armed and expired, followed
engines narrowing the targets."""

from __future__ import annotations

from tests.schedulers.test_book import A, B, Clock
from zpar.dependency import Dependency
from zpar.errors import ImpossibleDependency, ProtocolError
from zpar.schedulers.gating import Gates
from zpar.schedulers.schemes import EngineSlot
from zpar.schedulers.state import WAITING, Task


def gates(clock: Clock | None = None) -> Gates:
    engines = {u: EngineSlot(i, u) for i, u in enumerate((A, B))}
    return Gates(engines, {e.id: u for u, e in engines.items()}, clock or Clock())


def task(msg_id: str) -> Task:
    return Task(msg_id, b"client", None, None)


def test_plain_flags_say_place_it_now():
    t = task("t")
    assert gates().read(t, {"retries": 2, "targets": [1]}) is True
    assert t.retries == 2 and t.targets == frozenset({B})


def test_malformed_or_impossible_flags_say_why():
    g = gates()
    error, why = g.read(task("t"), {"retries": -1})
    assert error is ProtocolError and "retries" in why
    error, why = g.read(task("u"), {"targets": [7]})
    assert error is ImpossibleDependency and "none of the target engines" in why


def test_a_dependency_not_finished_waits_and_is_released_by_its_outcome():
    g = gates()
    t = task("b")
    assert g.read(t, {"after": Dependency(["a"]).to_wire()}) is False
    assert t.state == WAITING
    ((released, verdict),) = g.finished("a", (True, A))
    assert released is t and verdict == ""


def test_follow_narrows_the_targets_to_where_the_followed_task_ran():
    g = gates()
    g.finished("a", (True, B))
    t = task("c")
    assert g.read(t, {"follow": Dependency(["a"]).to_wire()}) is True
    assert t.targets == frozenset({B})


def test_only_the_newest_deadline_of_a_task_expires():
    clock = Clock()
    g = gates(clock)
    t = task("t")
    assert g.read(t, {"timeout": 1.0}) is True
    clock.now += 0.5
    g.arm(t)  # a retry re-arms it: the first deadline is stale
    clock.now += 0.6
    assert list(g.expired(clock.now)) == []
    clock.now += 0.5
    assert list(g.expired(clock.now)) == [t]
