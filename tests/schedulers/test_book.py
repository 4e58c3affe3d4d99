"""The task book in memory: events in, instructions out, no socket (schedulers/book.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.schedulers.bookrig import BookRig
from zpar.dependency import Dependency
from zpar.schedulers.book import TaskBook
from zpar.schedulers.events import EngineJoined, EngineLeft, QuotaRefused, Replied, Submitted
from zpar.schedulers.instructions import (
    AnswerAbort,
    FailTask,
    HubEvent,
    Refuse,
    RelayReply,
    SendTask,
)
from zpar.schedulers.state import HELD, QUEUED, RUNNING
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus
from zpar.wire.monitor import TaskIn, TaskRetry

A, B = b"engine-a", b"engine-b"
_ids = itertools.count()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(msg_id: str, client: bytes = b"client", *, msg_type: str = MsgType.APPLY_REQUEST,
            dest: str = "task", **metadata) -> Message:  # fmt: skip
    header = {"msg_id": msg_id, "msg_type": msg_type, "dest": dest}
    return Message([client], header, {}, metadata, {})


def reply(msg_id: str, status: str = ReplyStatus.OK, **content) -> Message:
    header = {"msg_id": f"reply-{next(_ids)}", "msg_type": MsgType.APPLY_REPLY}
    return Message([], header, {"msg_id": msg_id}, {}, {"status": status, **content})


def take(book: BookRig, kind: type | None = None) -> list:
    """The instructions the book asked for since the last take (of one kind, if given)."""
    out = list(book.out)
    book.out.clear()
    return [i for i in out if kind is None or isinstance(i, kind)]


def sends(book: BookRig) -> list[tuple[str, bytes]]:
    """Carry out the SendTasks as a driver whose engines are all connected would."""
    out = []
    for i in take(book):
        if isinstance(i, SendTask) and book.still_placed(i.task, i.engine):
            book.delivered(i.engine)
            out.append((i.task.msg_id, i.engine.uuid))
    return out


def two_engines(**kw) -> BookRig:
    book = BookRig("leastload", 1, **kw)
    book.engine_up(0, A)
    book.engine_up(1, B)
    return book


def test_places_on_engines_with_room_and_queues_the_rest():
    book = two_engines()
    for m in ("t1", "t2", "t3"):
        book.submission(b"client", request(m))
    assert sends(book) == [("t1", A), ("t2", B)]
    assert book.live["t3"].state == QUEUED
    book.reply(A, b"client", reply("t1"))
    out = take(book)
    assert [type(i) for i in out] == [RelayReply, SendTask]
    assert out[0].client == b"client" and out[0].engine == A
    assert (out[1].task.msg_id, out[1].engine.uuid) == ("t3", A)
    assert "t1" not in book.live and book.engines[A].load == 1


def test_submission_reports_the_task_to_the_hub_first():
    book = two_engines()
    book.submission(b"client", request("t1"))
    first = take(book)[0]
    assert isinstance(first, HubEvent) and isinstance(first.event, TaskIn)


def test_refuses_duplicates_and_requests_bound_elsewhere():
    book = two_engines()
    book.submission(b"client", request("t1"))
    take(book)
    book.submission(b"client", request("t1"))
    book.submission(b"client", request("t2", dest="engine-a"))
    assert [(r.reason) for r in take(book, Refuse)] == ["duplicate", "misrouted"]
    assert set(book.live) == {"t1"}


def test_a_message_that_is_not_a_task_request_fails_with_protocol_error():
    book = two_engines()
    book.submission(b"client", request("t1", msg_type=MsgType.CLEAR_REQUEST))
    (fail,) = take(book, FailTask)
    assert fail.ename == "ProtocolError" and not book.live


def test_malformed_flags_fail_the_task_not_the_book():
    book = two_engines()
    book.submission(b"client", request("t1", retries=-1))
    (fail,) = take(book, FailTask)
    assert fail.ename == "ProtocolError" and "retries" in fail.evalue
    assert not book.live


def test_engine_death_fails_running_tasks_or_retries_them_elsewhere():
    book = two_engines()
    book.submission(b"client", request("plain"))
    book.submission(b"client", request("retried", retries=1))
    assert sends(book) == [("plain", A), ("retried", B)]
    book.engine_down(B, "it stopped heartbeating")
    out = take(book)
    retry = [i.event for i in out if isinstance(i, HubEvent) and isinstance(i.event, TaskRetry)]
    assert [r.msg_id for r in retry] == ["retried"]
    assert book.live["retried"].state == QUEUED  # A is busy: it waits for room
    book.engine_down(A, "it stopped heartbeating")
    fails = take(book, FailTask)
    assert [(f.header["msg_id"], f.ename) for f in fails] == [("plain", "EngineError")]
    assert book.live["retried"].state == QUEUED  # no engine left: it waits for one


def test_engine_death_answers_each_task_once():
    book = two_engines()
    for m in ("t1", "t2", "t3"):
        book.submission(b"client", request(m))
    sends(book)
    book.engine_down(A, "gone")
    out = take(book)
    failed = [i.header["msg_id"] for i in out if isinstance(i, FailTask)]
    assert failed == ["t1"]
    book.reply(B, b"client", reply("t2"))
    assert [i.task.msg_id for i in take(book, SendTask)] == ["t3"]
    book.reply(A, b"client", reply("t1"))  # a late reply from the dead engine
    assert take(book) == []


def test_an_error_with_retries_goes_to_another_engine():
    book = two_engines()
    book.submission(b"client", request("t1", retries=1))
    sends(book)
    book.reply(A, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    assert sends(book) == [("t1", B)]
    assert book.live["t1"].attempt == 1
    book.reply(B, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    (relay,) = take(book, RelayReply)
    assert relay.engine == B and not book.live


def test_retries_with_a_timeout_wait_for_an_engine_not_yet_failed_then_time_out():
    """ipyparallel's test_retries: retries=len(engines), timeout=0.1: once every engine
    failed it, the task waits for another engine (never one it failed on) until its
    timeout, armed anew when it was requeued, and ends with TaskTimeout."""
    clock = Clock()
    book = BookRig("leastload", 1, clock=clock)
    book.engine_up(0, A)
    book.engine_up(1, B)
    book.submission(b"client", request("t1", retries=2, timeout=0.1))
    assert sends(book) == [("t1", A)]
    clock.now += 5  # runs past its timeout: the timeout counts only while it waits
    book.tick()
    book.reply(A, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    assert sends(book) == [("t1", B)]
    book.tick()
    book.reply(B, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    assert sends(book) == [] and book.live["t1"].state == QUEUED  # A and B failed it
    assert book.next_deadline() == pytest.approx(clock.now + 0.1)
    clock.now += 0.05
    book.tick()
    assert take(book, FailTask) == []
    clock.now += 0.1
    book.tick()
    (fail,) = take(book, FailTask)
    assert fail.ename == "TaskTimeout" and not book.live


def test_retries_with_a_timeout_run_on_an_engine_that_joins_in_time():
    clock = Clock()
    book = BookRig("leastload", 1, clock=clock)
    book.engine_up(0, A)
    book.submission(b"client", request("t1", retries=1, timeout=1))
    sends(book)
    book.reply(A, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    assert sends(book) == []
    book.engine_up(1, B)
    assert sends(book) == [("t1", B)]


def test_retries_without_a_timeout_end_when_every_engine_failed():
    """zpar's difference (ipython/ipython#7368): no timeout, no wait for ever."""
    book = two_engines()
    book.submission(b"client", request("t1", retries=3))
    for engine in (A, B, A, B):
        assert sends(book) == [("t1", engine)]
        book.reply(engine, b"client", reply("t1", ReplyStatus.ERROR, ename="ValueError"))
    (relay,) = take(book, RelayReply)
    assert not book.live


def test_unmet_dependency_everywhere_is_impossible():
    book = two_engines()
    book.submission(b"client", request("t1"))
    sends(book)
    book.reply(A, b"client", reply("t1", ReplyStatus.ERROR, ename="UnmetDependency"))
    assert sends(book) == [("t1", B)]
    book.reply(B, b"client", reply("t1", ReplyStatus.ERROR, ename="UnmetDependency"))
    (fail,) = take(book, FailTask)
    assert fail.ename == "ImpossibleDependency"


def test_after_waits_for_its_dependency():
    book = two_engines()
    book.submission(b"client", request("a"))
    book.submission(b"client", request("b", after=Dependency(["a"]).to_wire()))
    assert sends(book) == [("a", A)]
    assert book.live["b"].state == "waiting"
    book.reply(A, b"client", reply("a"))
    assert sends(book) == [("b", B)]  # both idle: the one given a task longest ago


def test_idle_engines_take_turns():
    """leastload breaks ties as ipyparallel's (its engines kept in LRU order): tasks sent
    one after another, each answered first, go to each engine in turn."""
    book = two_engines()
    got = []
    for i in range(4):
        book.submission(b"client", request(f"t{i}"))
        [(msg_id, engine)] = sends(book)
        got.append(engine)
        book.reply(engine, b"client", reply(msg_id))
    assert got == [A, B, A, B]


def test_follow_runs_where_its_dependency_ran():
    book = two_engines()
    book.submission(b"client", request("x"))
    book.submission(b"client", request("a"))
    assert sends(book) == [("x", A), ("a", B)]
    book.reply(B, b"client", reply("a"))
    book.reply(A, b"client", reply("x"))
    take(book)  # both idle now: leastload alone would pick A
    book.submission(b"client", request("c", follow=Dependency(["a"]).to_wire()))
    assert sends(book) == [("c", B)]


def test_abort_withdraws_queued_tasks_not_running_ones():
    book = two_engines()
    for m in ("t1", "t2", "t3"):
        book.submission(b"client", request(m))
    sends(book)
    book.abort(b"client", {"msg_id": "abort-1"}, {"msg_ids": ["t1", "t3"]})
    out = take(book)
    fails = [i for i in out if isinstance(i, FailTask)]
    assert [(f.header["msg_id"], f.ename, f.status) for f in fails] == [
        ("t3", "TaskAborted", ReplyStatus.ABORTED)
    ]
    (answer,) = [i for i in out if isinstance(i, AnswerAbort)]
    assert answer.aborted == ["t3"] and answer.parent["msg_id"] == "abort-1"
    assert book.live["t1"].state == RUNNING


@pytest.mark.parametrize("msg_ids", [7, {"t1": 1}, 2.5, b"t1", [1], ["t1", None]])
def test_an_abort_whose_msg_ids_is_not_a_list_is_refused(msg_ids):
    book = two_engines()
    book.submission(b"client", request("t1"))
    take(book)
    book.abort(b"client", {"msg_id": "abort-1"}, {"msg_ids": msg_ids})
    (refusal,) = take(book)
    assert isinstance(refusal, Refuse) and refusal.reason == "malformed"
    assert "abort_request's msg_ids" in refusal.detail
    assert book.live["t1"].state == RUNNING


def test_a_timeout_fails_a_task_still_waiting_for_an_engine():
    clock = Clock()
    book = BookRig("leastload", 1, clock=clock)
    book.submission(b"client", request("t1", timeout=2))
    take(book)
    assert book.next_deadline() == 102.0
    clock.now = 101.0
    book.tick()
    assert take(book) == []
    clock.now = 102.5
    book.tick()
    (fail,) = take(book, FailTask)
    assert fail.ename == "TaskTimeout" and not book.live


def test_an_engine_not_connected_yet_is_held_then_given_up():
    clock = Clock()
    book = BookRig("leastload", 1, clock=clock)
    book.engine_up(0, A)
    book.engine_up(1, B)
    book.submission(b"client", request("t1"))
    (send,) = take(book, SendTask)
    assert send.engine.uuid == A
    book.undeliverable(send.task, send.engine)  # A's connection is not up yet
    assert book.paused == {A}
    assert sends(book) == [("t1", B)]
    book.unpause()
    book.submission(b"client", request("t2"))
    (send,) = take(book, SendTask)
    assert send.engine.uuid == A
    clock.now += 60  # past the grace: A is given up, t2 waits for B
    book.undeliverable(send.task, send.engine)
    assert A not in book.engines and book.live["t2"].state == QUEUED


def test_a_stale_send_is_not_carried_out():
    book = BookRig("leastload", 0)  # no limit: both go to A in one turn
    book.engine_up(0, A)
    book.submission(b"client", request("t1", retries=1))
    book.submission(b"client", request("t2", retries=1))
    s1, s2 = take(book, SendTask)
    book.delivered(s1.engine)
    book.undeliverable(s1.task, s1.engine)  # A was reached before: it is gone
    assert not book.still_placed(s2.task, s2.engine)
    assert A not in book.engines
    assert book.live["t1"].state == book.live["t2"].state == QUEUED


def test_broadcast_sends_one_copy_to_each_target_and_relays_each_reply():
    book = two_engines()
    book.submission(b"client", request("bc", broadcast=[0, 1]))
    assert sorted(sends(book)) == [("bc", A), ("bc", B)]
    book.reply(A, b"client", reply("bc"))
    book.reply(B, b"client", reply("bc"))
    assert [r.engine for r in take(book, RelayReply)] == [A, B]
    assert not book.broadcasts.copies and book.engines[A].load == book.engines[B].load == 0


class OneAtATime:
    """A ledger letting each client have one task on the engines."""

    def __init__(self) -> None:
        self.placed_now: dict[bytes, int] = {}
        self.calls: list[tuple[str, bytes]] = []

    def admit(self, client: bytes) -> bool:
        return self.placed_now.get(client, 0) < 1

    def placed(self, client: bytes) -> None:
        self.placed_now[client] = self.placed_now.get(client, 0) + 1
        self.calls.append(("placed", client))

    def answered(self, client: bytes) -> None:
        self.placed_now[client] -= 1
        self.calls.append(("answered", client))


def test_the_ledger_holds_one_clients_tasks_and_lets_others_pass():
    ledger = OneAtATime()
    book = two_engines(ledger=ledger)
    book.submission(b"greedy", request("g1", b"greedy"))
    book.submission(b"greedy", request("g2", b"greedy"))
    book.submission(b"polite", request("p1", b"polite"))
    assert sends(book) == [("g1", A), ("p1", B)]
    assert book.live["g2"].state == HELD
    book.reply(A, b"greedy", reply("g1"))
    assert sends(book) == [("g2", A)]
    assert ledger.calls == [
        ("placed", b"greedy"),
        ("placed", b"polite"),
        ("answered", b"greedy"),
        ("placed", b"greedy"),
    ]


def test_the_ledger_is_told_when_a_placed_task_ends_in_the_schedulers_hands():
    ledger = OneAtATime()
    book = two_engines(ledger=ledger)
    book.submission(b"c", request("t1", b"c"))
    book.submission(b"c", request("t2", b"c"))
    sends(book)
    book.abort(b"c", {"msg_id": "ab"}, {"msg_ids": None})  # t2 was held: aborted
    assert [i.aborted for i in take(book, AnswerAbort)] == [["t2"]]
    book.engine_down(A, "gone")
    assert ledger.placed_now == {b"c": 0}


@pytest.mark.parametrize("scheme", ["leastload", "lru", "plainrandom", "twobin", "weighted"])
def test_every_scheme_places_every_task_exactly_once(scheme):
    book = BookRig(scheme, 2)
    for i, u in enumerate((A, B, b"engine-c")):
        book.engine_up(i, u)
    for n in range(50):
        book.submission(b"client", request(f"t{n}"))
    answered = []
    pending = sends(book)
    while pending:
        msg_id, uuid = pending.pop(0)
        book.reply(uuid, b"client", reply(msg_id))
        out = take(book)
        answered += [i.reply.parent_header["msg_id"] for i in out if isinstance(i, RelayReply)]
        pending += [(i.task.msg_id, i.engine.uuid) for i in out if isinstance(i, SendTask)]
    assert sorted(answered) == sorted(f"t{n}" for n in range(50))
    assert not book.live and all(e.load == 0 for e in book.engines.values())


# -- the entry point ------------------------------------------------------------------------


def test_handle_returns_what_the_events_ask_and_keeps_nothing():
    book = TaskBook("leastload", 1)
    out = book.handle(EngineJoined(0, A), Submitted(b"client", request("t1")))
    assert [type(i) for i in out] == [HubEvent, SendTask]
    assert book.handle() == []  # nothing left behind for another caller


def test_events_fed_together_ask_what_they_ask_one_at_a_time():
    events = [EngineJoined(0, A), EngineJoined(1, B)]
    events += [Submitted(b"client", request(f"t{n}")) for n in range(3)]
    events += [Replied(A, b"client", reply("t0")), EngineLeft(B, "gone")]

    def summary(out: list) -> list:
        return [(type(i).__name__, getattr(i, "header", {}).get("msg_id")) for i in out]

    together = TaskBook("leastload", 1)
    apart = TaskBook("leastload", 1)
    assert summary(together.handle(*events)) == summary(
        [i for e in events for i in apart.handle(e)]
    )


def test_a_quota_refusal_is_recorded_and_answered_never_placed():
    book = TaskBook("leastload", 1)
    book.handle(EngineJoined(0, A))
    hub, fail = book.handle(QuotaRefused(b"client", request("t1"), "over its window"))
    assert isinstance(hub, HubEvent) and isinstance(hub.event, TaskIn)
    assert isinstance(fail, FailTask) and fail.ename == "SubmissionRefused"
    assert fail.evalue == "over its window" and fail.engine is None
    assert not book.live and book.engines[A].load == 0


def test_an_unknown_event_is_refused_by_name():
    with pytest.raises(TypeError, match="no handler"):
        TaskBook().handle("submission")  # type: ignore[arg-type]
