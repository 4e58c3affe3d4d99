"""Element requests in the task book, in memory (schedulers/elements.py, zpar.elements):
parts relayed as they come, the last one frees the engine; unstarted tails asked back from
stalled engines and for idle ones, placed again as parts of their own; aborts; the
request finished for its dependents once every part answered."""

from __future__ import annotations

import itertools
from collections import deque

from tests.schedulers.bookrig import BookRig
from zpar.elements import ELEMENTS, ERRORS, FINAL, TAILS, origin_of
from zpar.schedulers.elements import IDLE_STEAL_AFTER, ElementParts
from zpar.schedulers.instructions import FailTask, RelayReply, RevokeTasks, SendTask
from zpar.schedulers.ledger import OpenLedger
from zpar.schedulers.placement import Placement
from zpar.schedulers.schemes import EngineSlot, leastload
from zpar.schedulers.state import DONE, QUEUED, RUNNING, Task
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus

A, B = b"engine-a", b"engine-b"
_ids = itertools.count()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(msg_id: str, n: int, **metadata) -> Message:
    header = {"msg_id": msg_id, "msg_type": MsgType.APPLY_REQUEST, "dest": "task"}
    return Message([b"client"], header, {}, {ELEMENTS: [0, n], **metadata}, {})


def part(
    msg_id: str, lo: int, hi: int, final: bool = False, status: str = ReplyStatus.OK
) -> Message:
    header = {"msg_id": f"reply-{next(_ids)}", "msg_type": MsgType.APPLY_REPLY}
    content = {"status": status, ELEMENTS: [lo, hi]}
    if final:
        content[FINAL] = True
    return Message([], header, {"msg_id": msg_id}, {}, content)


def take(book: BookRig, kind: type | None = None) -> list:
    out = list(book.out)
    book.out.clear()
    return [i for i in out if kind is None or isinstance(i, kind)]


def sends(book: BookRig) -> list[tuple[str, bytes, list[int] | None]]:
    out = []
    for i in take(book):
        if isinstance(i, SendTask) and book.still_placed(i.task, i.engine):
            book.delivered(i.engine)
            out.append((i.task.msg_id, i.engine.uuid, list(i.task.elements or [])))
    return out


def book_of(clock: Clock, hwm: int = 2) -> BookRig:
    book = BookRig("leastload", hwm, clock=clock)
    book.engine_up(0, A)
    book.engine_up(1, B)
    return book


def test_parts_are_relayed_and_the_last_frees_the_engine():
    book = book_of(Clock())
    book.submission(b"client", request("m", 10))
    assert sends(book) == [("m", A, [0, 10])]
    book.reply(A, b"client", part("m", 0, 4))
    (relay,) = take(book, RelayReply)
    assert relay.report and not relay.bare  # the hub records the map's elements by part
    assert book.live["m"].elements == [4, 10] and book.engines[A].load == 1
    book.reply(A, b"client", part("m", 4, 10, final=True))
    (relay,) = take(book, RelayReply)
    assert relay.report and not relay.bare  # each part with its values
    assert "m" not in book.live and book.engines[A].load == 0
    assert not book.elements.placements


class CountingLedger(OpenLedger):
    """Admits everyone; counts what it is told was placed and answered."""

    counts_tasks = True

    def __init__(self) -> None:
        self.placed_ = 0
        self.answered_ = 0

    def placed(self, client: bytes) -> None:
        self.placed_ += 1

    def answered(self, client: bytes) -> None:
        self.answered_ += 1


def test_the_part_alone_answers_parts_and_frees_the_engine_at_the_last():
    """ElementParts.reply built with the tables it is given, no book: parts relayed, a
    failed element placed again on its own, the last part frees the engine's slot and
    names the request finished (the book then releases its dependents)."""
    clock = Clock()
    engines: dict[bytes, EngineSlot] = {}
    live: dict[str, Task] = {}
    out: list = []
    failing: deque = deque()
    ledger = CountingLedger()
    placement = Placement(engines, leastload, ledger, clock, out, failing)
    parts = ElementParts(engines, live, placement, clock, out, failing, steals=True)
    engines[A] = EngineSlot(0, A, depth=2)
    engines[B] = EngineSlot(1, B, depth=2)
    task = live["m"] = Task("m", b"client", request("m", 10), None, retries=1)
    parts.start(task, {ELEMENTS: [0, 10]})
    placement.submit(task)
    assert task.state == RUNNING and task.engine is engines[A] and ledger.placed_ == 1
    out.clear()

    failed = part("m", 0, 4)
    failed.content[ERRORS] = {"2": {"ename": "ValueError"}}
    assert parts.reply(task, engines[A], b"client", failed) is None
    relay, send = out  # relayed, then element 2 placed again, elsewhere
    assert isinstance(relay, RelayReply) and relay.retrying == [2]
    assert task.elements == [4, 10] and engines[A].load == 1 and task.state == RUNNING
    (again,) = [t for m, t in live.items() if m != "m"]
    assert again.elements == [2, 3] and again.avoid == {A} and again.retries == 0
    assert isinstance(send, SendTask) and send.task is again and send.engine is engines[B]
    out.clear()

    assert parts.reply(task, engines[A], b"client", part("m", 4, 10, final=True)) is None
    assert task.state == DONE and "m" not in live and task.msg is None
    assert engines[A].load == 0 and "m" not in engines[A].tasks and ledger.answered_ == 1
    assert [type(i) for i in out] == [RelayReply]
    out.clear()
    # the last placement of the request answered: its dependents may go
    done = parts.reply(again, engines[B], b"client", part(again.msg_id, 2, 3, final=True))
    assert done == "m" and not parts.placements and not live


def test_a_stalled_engine_gives_its_unstarted_elements_back_to_an_idle_one():
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 100))
    sends(book)
    book.reply(A, b"client", part("m", 0, 1))  # element 1 now runs long
    take(book)
    clock.now += book.prefetch.steal_after + 0.001
    assert book.next_deadline() is not None and book.next_deadline() <= clock.now
    book.tick()
    (revoke,) = take(book, RevokeTasks)
    assert revoke.engine.uuid == A and revoke.tails == {"m": 0}
    book.revoked(A, [], {"m": [2, 100]})  # the engine runs element 1, gives 2..99 back
    ((key, engine, elements),) = sends(book)
    assert origin_of(key) == "m" and key != "m" and engine == B and elements == [2, 100]
    assert book.live["m"].elements == [1, 2]
    # the two placements answer; the request is finished for dependents after the last
    book.reply(B, b"client", part(key, 2, 100, final=True))
    assert book.elements.placements == {"m": 1}
    book.reply(A, b"client", part("m", 1, 2, final=True))
    assert not book.live and not book.elements.placements
    assert book.gates.graph.finished("m", (True, A)) == [] or True  # recorded as finished


def test_the_last_part_before_the_revoke_reply_places_the_rest_at_once():
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 50))
    sends(book)
    clock.now += book.prefetch.steal_after + 0.001
    book.tick()
    take(book)
    # the engine gave 10..49 back, ran 0..9 and its last part crossed the revoke reply
    book.reply(A, b"client", part("m", 0, 10, final=True))
    ((key, engine, elements),) = sends(book)
    assert elements == [10, 50] and engine in (A, B)
    book.revoked(A, [], {"m": [10, 50]})  # the placement is gone: nothing placed twice
    assert sends(book) == []


def test_an_idle_engine_takes_half_of_a_long_running_request():
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 1000))
    book.submission(b"client", request("n", 10))
    assert [s[:2] for s in sends(book)] == [("m", A), ("n", B)]
    book.reply(B, b"client", part("n", 0, 10, final=True))
    take(book)  # B is idle, nothing waits: too early to ask A
    assert not take(book, RevokeTasks)
    clock.now += IDLE_STEAL_AFTER + 0.001
    book.reply(A, b"client", part("m", 0, 200))  # A streams: not stalled
    take(book)
    book.tick()
    (revoke,) = take(book, RevokeTasks)
    assert revoke.engine.uuid == A and revoke.tails == {
        "m": 399
    }  # 800 left, 1 running: keeps half of 799
    assert revoke.msg_ids == ["m"]  # whole, if it has not started there
    book.revoked(A, [], {"m": [620, 1000]})
    ((key, engine, elements),) = sends(book)
    assert engine == B and elements == [620, 1000]
    assert book.live["m"].elements == [200, 620]


def test_abort_asks_back_what_engines_hold_and_fails_it_aborted():
    clock = Clock()
    book = book_of(clock, hwm=2)
    book.submission(b"client", request("m", 8, targets=None))
    sends(book)
    book.reply(A, b"client", part("m", 0, 2))  # 0, 1 done; 2 runs
    take(book)
    abort = Message(
        [b"client"],
        {"msg_id": "ab", "msg_type": MsgType.ABORT_REQUEST},
        {},
        {},
        {"msg_ids": ["m"]},
    )
    book.submission(b"client", abort)
    (revoke,) = take(book, RevokeTasks)
    assert revoke.tails == {"m": 0} and revoke.msg_ids == ["m"]
    book.revoked(A, [], {"m": [3, 8]})
    (fail,) = take(book, FailTask)
    assert fail.status == ReplyStatus.ABORTED and fail.elements == [3, 8]
    book.reply(A, b"client", part("m", 2, 3, final=True))
    assert not book.live and not book.elements.aborting


def test_queued_parts_of_an_aborted_map_are_aborted_in_the_scheduler():
    clock = Clock()
    book = book_of(clock, hwm=1)
    book.submission(b"client", request("x", 1))  # A busy
    book.submission(b"client", request("y", 1))  # B busy
    book.submission(b"client", request("m", 6))
    sends(book)
    assert book.live["m"].state == QUEUED
    abort = Message(
        [b"client"], {"msg_id": "ab", "msg_type": MsgType.ABORT_REQUEST}, {}, {}, {"msg_ids": ["m"]}
    )
    book.submission(b"client", abort)
    (fail,) = take(book, FailTask)
    assert fail.elements == [0, 6] and fail.status == ReplyStatus.ABORTED


def test_an_engine_dying_fails_only_the_unanswered_elements():
    book = book_of(Clock())
    book.submission(b"client", request("m", 10))
    sends(book)
    book.reply(A, b"client", part("m", 0, 7))
    take(book)
    book.engine_down(A, "gone")
    (fail,) = take(book, FailTask)
    assert fail.elements == [7, 10] and fail.ename == "EngineError"
    assert not book.live and not book.elements.placements


def test_an_element_request_runs_where_its_view_allows():
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 100, targets=[0]))
    assert [s[:2] for s in sends(book)] == [("m", A)]
    clock.now += book.prefetch.steal_after + 0.001
    book.tick()
    assert take(book, RevokeTasks) == []  # B is idle, but may not run it: nothing asked
    book.reply(A, b"client", part("m", 0, 100, final=True))
    assert not book.live and not book.elements.placements


def test_a_slow_element_leaves_its_run_in_place_while_the_other_engine_works():
    """Unstarted elements behind a slow one move only when an engine runs dry: pushed to
    an engine busy with its own run, they bounced between the engines at each slow one."""
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 100))
    book.submission(b"client", request("n", 100))
    assert [s[:2] for s in sends(book)] == [("m", A), ("n", B)]
    book.reply(A, b"client", part("m", 0, 10))  # element 10 runs long on A
    book.reply(B, b"client", part("n", 0, 10))
    take(book)
    for lo in range(10, 100, 10):  # B streams its run; A stays in its slow element
        clock.now += book.prefetch.steal_after / 2
        book.tick()
        assert take(book, RevokeTasks) == []
        final = lo == 90
        book.reply(B, b"client", part("n", lo, lo + 10, final=final))
    # B ran dry: it takes every unstarted element of the stalled A, not half
    (revoke,) = take(book, RevokeTasks)
    assert revoke.engine.uuid == A and revoke.tails == {"m": 0}
    book.revoked(A, [], {"m": [11, 100]})
    ((key, engine, elements),) = sends(book)
    assert engine == B and elements == [11, 100] and book.live["m"].elements == [10, 11]


def test_revoke_replies_without_tails_change_nothing_for_element_requests():
    book = book_of(Clock())
    book.submission(b"client", request("m", 10))
    sends(book)
    book.revoked(A, [], {})
    assert book.live["m"].elements == [0, 10] and TAILS == "tails"


def test_a_failed_element_is_retried_alone_elsewhere():
    book = book_of(Clock())
    book.submission(b"client", request("m", 10, retries=1))
    sends(book)
    failed = part("m", 0, 5)
    failed.content["errors"] = {"3": {"status": "error", "ename": "ValueError", "evalue": "x"}}
    book.reply(A, b"client", failed)
    out = take(book)
    (relay,) = [i for i in out if isinstance(i, RelayReply)]
    assert relay.retrying == [3]  # the client waits for element 3's second answer
    (send,) = [i for i in out if isinstance(i, SendTask)]
    key, engine, elements = send.task.msg_id, send.engine.uuid, send.task.elements
    assert origin_of(key) == "m" and elements == [3, 4] and engine == B
    assert book.live[key].retries == 0 and A in book.live[key].avoid
    book.reply(A, b"client", part("m", 5, 10, final=True))
    take(book)
    assert book.elements.placements == {"m": 1}  # finished once the retry answered
    again = part(key, 3, 4, final=True)
    again.content["errors"] = {"3": {"status": "error", "ename": "ValueError", "evalue": "x"}}
    book.reply(B, b"client", again)
    (relay,) = take(book, RelayReply)
    assert relay.retrying is None and not book.live  # no retries left: its error stands


def test_a_part_revoked_before_it_started_comes_back_under_a_new_id():
    # the copy left in the engine's hand is dropped when reached; the new one must never be
    # taken for it, however often the part is revoked (its id names one copy)
    clock = Clock()
    book = book_of(clock)
    book.submission(b"client", request("m", 10))
    book.submission(b"client", request("n", 10))
    sends(book)
    book.submission(b"client", request("p", 10))
    ((key, engine, _),) = sends(book)  # prefetched behind m or n
    clock.now += book.prefetch.steal_after + 0.001
    book.tick()
    revokes = [r for r in take(book, RevokeTasks) if r.engine.uuid == engine]
    assert revokes and key in revokes[0].msg_ids
    book.revoked(engine, [key], {})
    assert key not in book.live and book.elements.placements["p"] == 1
    (again,) = [k for k in book.live if origin_of(k) == "p"]
    assert again != key and book.live[again].elements == [0, 10]
