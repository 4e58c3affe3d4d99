"""The task book driven by a ClientLedger, in memory: a client that stops reading has its
tasks held (others run), gets them placed again in order when it catches up, and a gone
client's tasks not yet on an engine are cancelled once (schedulers/clientledger.py)."""

from __future__ import annotations

from tests.schedulers.bookrig import BookRig
from tests.schedulers.test_book import A, B, reply, request, sends, take, two_engines
from tests.schedulers.test_clientledger import deliver, flush
from zpar.dependency import Dependency
from zpar.schedulers.clientledger import ClientLedger
from zpar.schedulers.clientlink import Send
from zpar.schedulers.instructions import FailTask, RelayReply
from zpar.schedulers.state import HELD, QUEUED, RUNNING, WAITING
from zpar.wire.messages import ReplyStatus

SLOW, FAST = b"slow", b"fast"


class Pipes:
    """Each client's pipe: FULL while ``full`` holds the client, else SENT."""

    def __init__(self) -> None:
        self.full: set[bytes] = set()
        self.out: list[tuple[bytes, object]] = []

    def __call__(self, client: bytes, reply: object) -> Send:
        if client in self.full:
            return Send.FULL
        self.out.append((client, reply))
        return Send.SENT


def relay(book, ledger, pipes) -> None:
    """Carry out the book's relays through the ledger, as task.py's loop does (other
    instructions stay for ``sends``)."""
    others = []
    for i in take(book):
        if isinstance(i, RelayReply):
            deliver(ledger, i.client, i.reply, pipes)
        else:
            others.append(i)
    book.out.extend(others)


def test_a_client_not_reading_has_its_tasks_held_and_others_run():
    ledger, pipes = ClientLedger(), Pipes()
    book = two_engines(ledger=ledger)
    for m in ("s1", "s2", "s3", "s4"):
        book.submission(SLOW, request(m, SLOW))
    assert sends(book) == [("s1", A), ("s2", B)]
    pipes.full.add(SLOW)  # it stops reading
    book.reply(A, SLOW, reply("s1"))
    relay(book, ledger, pipes)  # s1's reply parked; s3 was placed on A before it parked
    book.reply(B, SLOW, reply("s2"))
    relay(book, ledger, pipes)
    assert ledger.stalled(SLOW) and ledger.parked_of(SLOW) >= 1
    # from now on none of its tasks goes to an engine; another client's does
    book.submission(FAST, request("f1", FAST))
    placed = sends(book)
    assert ("f1", A) in placed or ("f1", B) in placed
    assert book.live["s4"].state in (HELD, QUEUED)
    for m, e in placed:
        if m.startswith("s"):
            book.reply(e, SLOW, reply(m))
            relay(book, ledger, pipes)
    assert all(t.state != RUNNING for t in book.live.values() if t.client == SLOW)
    assert any(t.state == HELD for t in book.live.values() if t.client == SLOW)


def test_a_client_that_catches_up_gets_its_held_tasks_placed_in_order():
    ledger, pipes = ClientLedger(), Pipes()
    book = two_engines(ledger=ledger)
    pipes.full.add(SLOW)
    deliver(ledger, SLOW, "earlier reply", pipes)  # stalled before it submits
    for m in ("s1", "s2", "s3"):
        book.submission(SLOW, request(m, SLOW))
    assert sends(book) == []
    assert [book.live[m].state for m in ("s1", "s2", "s3")] == [HELD] * 3
    pipes.full.clear()
    caught_up, gone = flush(ledger, pipes)
    assert caught_up == [SLOW] and gone == [] and pipes.out == [(SLOW, "earlier reply")]
    for client in caught_up:
        book.client_ready(client)
    assert sends(book) == [("s1", A), ("s2", B)]
    assert book.live["s3"].state == QUEUED  # no room now: in the queue, first in line
    book.reply(A, SLOW, reply("s1"))
    relay(book, ledger, pipes)
    assert sends(book) == [("s3", A)]


def test_a_gone_clients_waiting_queued_and_held_tasks_are_cancelled_once():
    ledger = ClientLedger()
    book = two_engines(ledger=ledger)
    for m in ("r1", "r2", "q1"):
        book.submission(SLOW, request(m, SLOW))
    book.submission(SLOW, request("w1", SLOW, after=Dependency(["r1"]).to_wire()))
    book.submission(FAST, request("f1", FAST))
    assert sends(book) == [("r1", A), ("r2", B)]
    assert book.live["q1"].state == QUEUED and book.live["w1"].state == WAITING
    ledger.seen(SLOW, 7)
    assert ledger.closed(7) == SLOW
    ledger.forget(SLOW)
    book.client_gone(SLOW)
    fails = take(book, FailTask)
    assert {f.header["msg_id"] for f in fails} == {"q1", "w1"}
    assert all(f.status == ReplyStatus.CANCELLED and f.ename == "TaskCancelled" for f in fails)
    assert all(f.client == SLOW for f in fails)
    # running ones finish; the freed engine goes to the other client, not to an orphan
    book.reply(A, SLOW, reply("r1"))
    out = take(book)
    assert [i.task.msg_id for i in out if hasattr(i, "task")] == ["f1"]
    book.client_gone(SLOW)  # told again: nothing left to cancel
    assert take(book, FailTask) == []
    # a submission that arrives after the close is held (never admitted), then cancelled
    book.submission(SLOW, request("late", SLOW))
    book.client_gone(SLOW)
    assert [f.header["msg_id"] for f in take(book, FailTask)] == ["late"]
    assert not any(t.client == SLOW for t in book.live.values() if t.msg_id != "r2")


def test_a_gone_clients_task_back_from_an_engine_is_cancelled_not_held_for_ever():
    # a revoke (or a retry) that returns a task after its client's connection closed:
    # held, it would wait for a client that never reads again (found by the CI load test)
    from tests.schedulers.test_book import Clock

    clock, ledger = Clock(), ClientLedger()
    book = BookRig("leastload", 2, clock=clock, ledger=ledger)
    book.engine_up(0, A)
    book.engine_up(1, B)
    for m in ("long", "other", "third"):
        book.submission(SLOW, request(m, SLOW))
    sends(book)  # long and third on A, other on B
    clock.now += 1
    book.tick()
    take(book)  # the revoke of A's unstarted task
    ledger.forget(SLOW)
    book.client_gone(SLOW)  # nothing of it waits in the book: every task is on an engine
    assert take(book, FailTask) == []
    book.revoked(A, ["third"])  # after the close: back from the engine
    (fail,) = take(book, FailTask)
    assert fail.header["msg_id"] == "third" and fail.status == ReplyStatus.CANCELLED
    assert "third" not in book.live and SLOW not in book.placement.held
