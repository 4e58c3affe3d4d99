"""Prefetch in memory (schedulers/prefetch.py): each engine's depth, deeper for quick
engines while tasks wait, and what a stalled engine has not started taken back; first the
part on its own, then through the book's ``handle``."""

from __future__ import annotations

from collections import deque

import pytest

from tests.schedulers.bookrig import BookRig
from tests.schedulers.test_book import A, B, Clock, reply, request, sends, take
from zpar.constants import TASK_HWM_LOADED
from zpar.schedulers.elements import ElementParts
from zpar.schedulers.instructions import HubEvent, RevokeTasks, SendTask
from zpar.schedulers.ledger import OpenLedger
from zpar.schedulers.placement import Placement
from zpar.schedulers.prefetch import Prefetch
from zpar.schedulers.schemes import EngineSlot, leastload
from zpar.schedulers.state import QUEUED, RUNNING, Task
from zpar.wire.monitor import TaskDest


def parts(clock: Clock, hwm: int = 2):
    """A Prefetch built alone, with the tables and parts it is given by the book."""
    engines: dict[bytes, EngineSlot] = {}
    live: dict[str, Task] = {}
    out: list = []
    failing: deque = deque()
    placement = Placement(engines, leastload, OpenLedger(), clock, out, failing)
    elements = ElementParts(engines, live, placement, clock, out, failing, steals=hwm > 1)
    prefetch = Prefetch(hwm, engines, live, placement, elements, clock, out)
    for i, u in enumerate((A, B)):
        engines[u] = EngineSlot(i, u, depth=prefetch.depth)
    return prefetch, placement, engines, live, out


def test_the_part_alone_takes_back_what_a_stalled_engine_holds():
    clock = Clock()
    prefetch, placement, engines, live, out = parts(clock)
    for m in ("long", "short"):
        live[m] = Task(m, b"client", None, None)
    placement.submit(live["long"])
    placement.submit(live["short"])
    engines[B].depth = 0  # both on A
    placement.submit(t := Task("t", b"client", None, None))
    live["t"] = t
    assert [i.engine.uuid for i in out if isinstance(i, SendTask)] == [A, B, A]
    out.clear()
    assert prefetch.stall_deadline() == engines[A].since + prefetch.steal_after
    clock.now += prefetch.steal_after + 0.001
    prefetch.steal(clock.now)
    (revoke,) = out
    assert isinstance(revoke, RevokeTasks) and sorted(revoke.msg_ids) == ["long", "t"]
    assert engines[A].depth == 1 and engines[A].revoking
    out.clear()
    prefetch.revoked(engines[A], ["t"])  # "long" had started
    assert out == [HubEvent(TaskDest("t", ""))] and list(placement.queue) == [t]
    assert t.attempt == 1 and engines[A].load == 1 and not engines[A].revoking


def test_the_part_alone_deepens_a_quick_engine_while_tasks_wait():
    clock = Clock()
    prefetch, placement, engines, live, out = parts(clock)
    engines[A].since = clock.now
    placement.queue.append(Task("waiting", b"client", None, None))
    clock.now += prefetch.fast_answer / 2
    prefetch.answered_by(engines[A])
    assert engines[A].depth == prefetch.loaded_depth == TASK_HWM_LOADED
    clock.now += 2 * prefetch.fast_answer
    prefetch.answered_by(engines[A])
    assert engines[A].depth == 2


# -- prefetch: depth > 1, and taking back what a stalled engine has not started -----------


def prefetching(clock: Clock) -> BookRig:
    book = BookRig("leastload", 2, clock=clock)
    book.engine_up(0, A)
    book.engine_up(1, B)
    return book


def test_prefetch_gives_each_engine_its_depth():
    book = prefetching(Clock())
    for n in range(5):
        book.submission(b"client", request(f"t{n}"))
    placed = sends(book)
    assert sorted(u for _, u in placed) == [A, A, B, B]
    assert book.live["t4"].state == QUEUED


def test_a_stalled_engine_is_asked_for_its_unstarted_tasks():
    clock = Clock()
    book = prefetching(clock)
    for name in ("long", "short-1", "short-2", "short-3"):
        book.submission(b"client", request(name))
    assert sends(book) == [("long", A), ("short-1", B), ("short-2", A), ("short-3", B)]
    clock.now += book.prefetch.steal_after / 2
    book.reply(B, b"client", reply("short-1"))  # B answers: it is not stalled
    take(book)
    clock.now += book.prefetch.steal_after
    assert book.next_deadline() <= clock.now
    book.tick()
    (revoke,) = take(book, RevokeTasks)
    assert revoke.engine.uuid == A and sorted(revoke.msg_ids) == ["long", "short-2"]
    assert book.engines[A].depth == 1
    book.tick()  # asked once, not again while the answer is on its way
    assert take(book, RevokeTasks) == []
    book.revoked(A, ["short-2"])  # "long" had started
    assert book.live["short-2"].attempt == 1  # signed anew for its next engine
    assert sends(book) == [("short-2", B)]  # B has room; A, stalled, keeps only "long"
    assert book.engines[A].load == 1


def test_a_stalled_engine_gets_no_second_task_until_it_answers():
    clock = Clock()
    book = prefetching(clock)
    book.submission(b"client", request("long"))
    book.submission(b"client", request("other"))
    book.submission(b"client", request("third"))
    sends(book)  # long on A, other on B, third on A
    clock.now += 1
    book.tick()
    revoke = take(book, RevokeTasks)[0]
    book.revoked(A, [m for m in revoke.msg_ids if m != "long"])
    for n in range(4):
        book.submission(b"client", request(f"more-{n}"))
    placed = sends(book)
    assert all(u == B for _, u in placed)
    book.reply(A, b"client", reply("long"))
    # a slow answer: hwm again, even with tasks waiting (deeper only for quick engines)
    assert book.engines[A].depth == 2
    assert [u for _, u in sends(book)].count(A) == 2


def test_prefetch_grows_under_load_and_comes_back_at_rest():
    clock = Clock()
    book = prefetching(clock)
    for n in range(20):
        book.submission(b"client", request(f"t{n}"))
    assert [u for _, u in sends(book)] == [A, B, A, B]  # hwm 2 each, 16 queued
    book.reply(A, b"client", reply("t0"))  # answers while tasks wait: deeper
    assert book.engines[A].depth == TASK_HWM_LOADED
    assert [u for _, u in sends(book)] == [A] * (TASK_HWM_LOADED - 1)
    for n in (2, 4, 5, 6, 7, 8, 9, 10):
        book.reply(A, b"client", reply(f"t{n}"))
    assert [u for _, u in sends(book)] == [A] * 8  # one for each answer
    assert [t.msg_id for t in book.placement.queue] == ["t19"]
    book.reply(A, b"client", reply("t11"))
    assert [u for _, u in sends(book)] == [A] and not book.placement.queue
    for n in range(12, 20):
        book.reply(A, b"client", reply(f"t{n}"))
    assert book.engines[A].depth == 2  # nothing waits: back to hwm
    assert book.engines[B].depth == 2  # never answered under load
    for n in range(20, 40):
        book.submission(b"client", request(f"t{n}"))
    take(book)
    clock.now += 2 * book.prefetch.fast_answer  # tasks longer than fast_answer: not a quick engine
    book.reply(B, b"client", reply("t1"))
    assert book.placement.queue and book.engines[B].depth == 2


def test_a_revoke_crossing_the_reply_changes_nothing():
    clock = Clock()
    book = prefetching(clock)
    book.submission(b"client", request("t1"))
    book.submission(b"client", request("t2"))
    book.submission(b"client", request("t3"))
    sends(book)
    clock.now += 1
    book.tick()
    take(book)
    book.reply(A, b"client", reply("t1"))
    take(book)
    book.revoked(A, ["t1"])  # answered already: not placed again
    assert "t1" not in book.live and take(book, SendTask) == []


def test_revoked_tasks_of_a_gone_engine_are_not_placed_twice():
    clock = Clock()
    book = prefetching(clock)
    for n in range(3):
        book.submission(b"client", request(f"t{n}", retries=1))
    sends(book)
    clock.now += 1
    book.tick()
    take(book)
    book.engine_down(A, "gone")  # its tasks are retried on B (or wait for it)
    take(book)
    book.revoked(A, ["t2"])  # the answer of the dead engine's thread, late
    assert take(book) == []
    assert sum(1 for t in book.live.values() if t.state == RUNNING) <= 2


@pytest.mark.parametrize("hwm", [1, 0])
def test_no_steal_without_a_prefetch_depth(hwm):
    """hwm 1 prefetches nothing; hwm 0 (unlimited) asked for every task on the engines."""
    clock = Clock()
    book = BookRig("leastload", hwm, clock=clock)
    book.engine_up(0, A)
    for n in range(3):
        book.submission(b"client", request(f"t{n}"))
    sends(book)
    clock.now += 60
    assert book.next_deadline() is None
    book.tick()
    assert take(book) == []
