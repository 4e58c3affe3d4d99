"""The engine's revoke gate: a prefetched task runs here or is given back, never both."""

from __future__ import annotations

import threading

import pytest

from zpar.engine.revoke import STARTED_MEMORY, RevokeGate


def test_a_revoked_task_is_dropped_when_reached():
    gate = RevokeGate()
    assert gate.revoke(["a", "b"]) == ["a", "b"]
    assert gate.start("a") is False
    assert gate.start("c") is True
    assert len(gate) == 1  # b is still to come


def test_a_started_task_is_not_revoked():
    gate = RevokeGate()
    assert gate.start("a")
    assert gate.revoke(["a", "b"]) == ["b"]
    assert gate.start("b") is False


def test_a_task_placed_again_on_the_same_engine_runs_its_new_copy():
    gate = RevokeGate()
    gate.revoke(["a"])
    assert gate.start("a") is False  # the old copy, first in the pipe
    assert gate.start("a") is True  # the one placed again


def test_started_memory_is_bounded():
    gate = RevokeGate()
    for n in range(STARTED_MEMORY + 10):
        gate.start(str(n))
    assert gate.revoke(["0"]) == ["0"]  # long forgotten (no revoke names such old tasks)
    assert gate.revoke([str(STARTED_MEMORY + 9)]) == []


def race(gate: RevokeGate, ids: list[str]) -> tuple[list[str], list[str]]:
    """The main thread starts every id in turn while the signal thread revokes them."""
    started: list[str] = []
    revoked: list[str] = []
    barrier = threading.Barrier(2)

    def main() -> None:
        barrier.wait()
        started.extend(m for m in ids if gate.start(m))

    def signal_thread() -> None:
        barrier.wait()
        for i in range(0, len(ids), 7):
            revoked.extend(gate.revoke(ids[i : i + 7]))

    threads = [threading.Thread(target=main), threading.Thread(target=signal_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return started, revoked


def test_each_task_runs_or_is_revoked_exactly_once_across_threads():
    ids = [str(n) for n in range(500)]
    for _ in range(20):
        started, revoked = race(RevokeGate(), ids)
        assert sorted(started + revoked, key=int) == ids
        assert not set(started) & set(revoked)


def test_an_element_request_gives_back_its_unstarted_tail():
    gate = RevokeGate()
    assert gate.start("m")
    positions = gate.begin("m", 0, 10)
    assert positions.popleft() == 0 and positions.popleft() == 1  # 0, 1 started
    assert gate.give_back({"m": 3}) == {"m": [5, 10]}  # keeps 2, 3, 4
    assert list(positions) == [2, 3, 4]
    assert gate.give_back({"other": 0}) == {}  # names another request: nothing
    assert gate.give_back({"m": 0}) == {"m": [2, 5]}
    assert not positions
    with pytest.raises(IndexError):
        positions.popleft()  # the main thread finds nothing left to start
    gate.end()
    assert gate.give_back({"m": 0}) == {}  # over: nothing to give


def test_give_back_races_the_main_thread_without_running_an_element_twice():
    gate = RevokeGate()
    positions = gate.begin("m", 0, 200_000)
    ran = []

    def main_thread():
        while True:
            try:
                ran.append(positions.popleft())
            except IndexError:
                return

    t = threading.Thread(target=main_thread)
    t.start()
    given = gate.give_back({"m": 0})
    t.join()
    back = range(*given["m"]) if given else range(0)
    assert sorted([*ran, *back]) == list(range(200_000))  # each once, here or given back
