"""The engine's serving loop over in-process sockets: batches of requests checked one by
one, replies of a batch sent together, a held reply sent by the watchdog while the next
task runs on, and abort / revoke reaching the tasks in hand, each reply sent once."""

from __future__ import annotations

import itertools

import pytest
import zmq

from zpar.engine.iopub import IOPub
from zpar.engine.kernel import Kernel
from zpar.engine.replies import HELD_BYTES_MAX, HELD_REPLIES_MAX, ReplySender
from zpar.engine.revoke import RevokeGate
from zpar.engine.serving import RunState, Server, Sockets
from zpar.serialize import deserialize_object, pack_apply
from zpar.wire import Session, batch, split_messages
from zpar.wire.messages import MsgType, ReplyStatus

pytestmark = pytest.mark.timeout(60)

KEY = b"serving-test-key"
UUID = "engine-under-test"
_n = itertools.count()

#: the test's end of the task socket, for functions that look at it while they run
_scheduler: dict[str, zmq.Socket] = {}


def noop():
    return None


def bulky():
    return b"x" * (HELD_BYTES_MAX // 2 + 1)


def replies_arrived_before_me():
    """Whether a reply reached the scheduler's end before this task started (waits up to
    10 s for it: a reply held until this task ends would never arrive in time)."""
    return bool(_scheduler["task"].poll(10_000))


class Rig:
    """A Server on inproc sockets; the test plays scheduler (task) and hub (control)."""

    def __init__(self, ctx: zmq.Context) -> None:
        tag = next(_n)
        self.client = Session(KEY)
        self.scheduler = ctx.socket(zmq.ROUTER)
        self.scheduler.bind(f"inproc://task-{tag}")
        self.hub = ctx.socket(zmq.ROUTER)
        self.hub.bind(f"inproc://control-{tag}")
        _scheduler["task"] = self.scheduler

        def dealer(addr: str) -> zmq.Socket:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, UUID.encode())
            s.connect(addr)
            return s

        self.task = dealer(f"inproc://task-{tag}")
        self.control = dealer(f"inproc://control-{tag}")
        self.mux = dealer(f"inproc://mux-{tag}")
        ping = ctx.socket(zmq.SUB)
        xpub = ctx.socket(zmq.XPUB)
        xpub.bind(f"inproc://iopub-{tag}")
        self.session = Session(KEY)
        iopub = IOPub(xpub, self.session, None)
        self.kernel = Kernel(0, UUID, publish=iopub.publish)
        self.gate = RevokeGate()
        self.replies = ReplySender(self.session, 0, UUID)
        self.server = Server(
            engine_id=0,
            engine_uuid=UUID,
            session=self.session,
            kernel=self.kernel,
            sockets=Sockets(self.control, self.mux, self.task, ping),
            iopub=iopub,
            replies=self.replies,
            state=RunState(),
            gate=self.gate,
        )

    def apply(self, f, *args, dest: str = UUID, **metadata) -> tuple[str, list]:
        header, frames = self.client.serialize(
            MsgType.APPLY_REQUEST, {}, buffers=pack_apply(f, args), metadata=metadata, dest=dest
        )
        return header["msg_id"], frames

    def place(self, *messages: list) -> None:
        """Send messages to the engine's task socket, as one batch when several."""
        self.scheduler.send_multipart([UUID.encode(), b"client", *batch(list(messages))])
        assert self.task.poll(5000)

    def run_all(self) -> None:
        self.server.take(self.task)
        while self.server.in_hand:
            self.server.run_next()
        self.replies.flush()

    def received(self, sock: zmq.Socket | None = None) -> list[list]:
        """Each multipart the engine sent (to the scheduler by default), split into its
        messages: [[reply, ...], ...], each reply decoded."""
        sock = sock or self.scheduler
        got = []
        while sock.poll(200):
            idents, messages = split_messages(sock.recv_multipart())
            assert idents[0] == UUID.encode()
            got.append([self.client.unpack(m, idents) for m in messages])
        return got


@pytest.fixture
def rig():
    ctx = zmq.Context()
    r = Rig(ctx)
    yield r
    r.kernel.close()
    r.replies.watchdog.close()
    ctx.destroy(linger=0)


def warm(rig: Rig, f) -> None:
    """Run f once alone (its first run loads what it needs)."""
    rig.place(rig.apply(f)[1])
    rig.run_all()
    assert len(rig.received()) == 1


@pytest.fixture
def patient(rig):
    """A watchdog that never fires in a test's time: on a loaded host a batch of no-ops
    can take longer than HOLD_LIMIT, and these tests pin what the main thread does."""
    rig.replies.watchdog.limit = 600.0


def test_each_request_of_a_batch_is_checked_on_its_own(rig):
    a, good = rig.apply(noop)
    _, forged = rig.apply(noop)
    forged[2] = forged[2].replace(b"apply_request", b"apply_requesu")  # signature fails
    _, elsewhere = rig.apply(noop, dest="another-engine")
    c, also_good = rig.apply(noop)
    rig.place(good, forged, elsewhere, also_good)
    rig.run_all()
    answered = [m.parent_header["msg_id"] for part in rig.received() for m in part]
    assert answered == [a, c]
    assert rig.session.refused["bad-signature"] == 1
    assert rig.session.refused["misrouted"] == 1


def test_a_lone_reply_is_sent_alone_at_once(rig):
    warm(rig, noop)
    msg_id, frames = rig.apply(noop)
    rig.place(frames)
    rig.server.take(rig.task)
    rig.server.run_next()  # no flush: nothing may be held for company
    got = rig.received()
    assert [[m.parent_header["msg_id"] for m in part] for part in got] == [[msg_id]]


def test_replies_of_a_batch_go_back_together_in_order(rig, patient):
    warm(rig, noop)
    n = HELD_REPLIES_MAX + 2
    ids, frames = zip(*(rig.apply(noop) for _ in range(n)), strict=True)
    rig.place(*frames)
    rig.run_all()
    got = rig.received()
    # HELD_REPLIES_MAX together, then the rest (the last one of the batch sends them)
    assert [len(part) for part in got] == [HELD_REPLIES_MAX, 2]
    assert [m.parent_header["msg_id"] for part in got for m in part] == list(ids)
    assert all(m.content["status"] == ReplyStatus.OK for part in got for m in part)
    assert rig.replies.watchdog.flushes == 0


def test_replies_held_past_the_limit_leave_with_the_next_one(rig, monkeypatch):
    """Between two tasks the main thread applies the bound itself: a reply made once the
    held ones waited the limit leaves with them (each task here outlasts a 0 s limit)."""
    warm(rig, noop)
    rig.replies.watchdog.limit = 0.0
    monkeypatch.setattr(rig.replies.watchdog, "enter", lambda since: None)  # no thread
    ids, frames = zip(*(rig.apply(noop) for _ in range(3)), strict=True)
    rig.place(*frames)
    rig.run_all()
    got = rig.received()
    # the first is held (nothing was), the second finds it held past 0 s: both leave
    assert [[m.parent_header["msg_id"] for m in part] for part in got] == [
        [ids[0], ids[1]],
        [ids[2]],
    ]


def test_a_held_reply_leaves_while_the_next_task_still_runs(rig):
    """The watchdog sends it: the next task sees it arrive at the scheduler's end, which
    it would never do if the reply waited for that task to end."""
    warm(rig, noop)
    first, a = rig.apply(noop)
    second, b = rig.apply(replies_arrived_before_me)
    rig.place(a, b)
    rig.run_all()
    got = rig.received()
    assert [[m.parent_header["msg_id"] for m in part] for part in got] == [[first], [second]]
    assert deserialize_object(got[1][0].buffers) is True  # it saw the first reply waiting
    assert rig.replies.watchdog.flushes == 1


def _block_until_a_reply_arrives_then(action: str, msg_id: str) -> bool:
    """Inside a task: wait for a reply at the scheduler's end (the watchdog's), then act
    on a later task of the batch as the signal thread or the hub would meanwhile."""
    arrived = bool(_scheduler["task"].poll(10_000))
    if action == "revoke":
        _scheduler["gate"].revoke([msg_id])
    else:
        _scheduler["hub"].send_multipart(_scheduler[f"abort {msg_id}"])
    return arrived


@pytest.mark.parametrize("action", ["revoke", "abort"])
def test_each_reply_leaves_once_when_the_watchdog_sent_some_and_the_rest_is_cut(rig, action):
    warm(rig, noop)
    a, fa = rig.apply(noop)  # the first reply of the batch: held (nothing was)
    c, fc = rig.apply(noop)  # revoked or aborted while d runs
    d, fd = rig.apply(_block_until_a_reply_arrives_then, action, c)
    e, fe = rig.apply(noop)
    _scheduler["gate"] = rig.gate
    _scheduler["hub"] = rig.hub
    _, abort = rig.client.serialize(MsgType.ABORT_REQUEST, {"msg_ids": [c]}, dest=UUID)
    _scheduler[f"abort {c}"] = [UUID.encode(), b"client", *abort]
    # a's reply is held while d runs, until the watchdog sends it; d cuts c
    rig.place(fa, fd, fc, fe)
    rig.server.take(rig.task)
    while rig.server.in_hand:
        if rig.control.poll(0):  # as the loop: control before the next request
            rig.replies.flush()
            rig.server.drain_control()
            continue
        rig.server.run_next()
    assert not rig.replies.held
    replies = [m for p in rig.received() for m in p]
    answered = [m.parent_header["msg_id"] for m in replies]
    status = {m.parent_header["msg_id"]: m.content["status"] for m in replies}
    if action == "revoke":
        assert answered == [a, d, e]  # c placed elsewhere by the scheduler, unanswered
    else:
        assert answered == [a, d, c, e]
        assert status[c] == ReplyStatus.ABORTED
    assert rig.replies.watchdog.flushes == 1  # a's, while d ran
    assert deserialize_object(next(m for m in replies if m.parent_header["msg_id"] == d).buffers)


def test_an_abort_reaches_the_tasks_in_hand(rig):
    warm(rig, noop)
    ids = []
    frames = []
    for _ in range(3):
        i, f = rig.apply(noop)
        ids.append(i)
        frames.append(f)
    rig.place(*frames)
    rig.server.take(rig.task)
    _, abort = rig.client.serialize(MsgType.ABORT_REQUEST, {"msg_ids": None}, dest=UUID)
    rig.hub.send_multipart([UUID.encode(), b"client", *abort])
    assert rig.control.poll(5000)
    rig.server.drain_control()
    assert not rig.server.in_hand
    aborted = [m for part in rig.received() for m in part]
    assert [m.parent_header["msg_id"] for m in aborted] == ids
    assert all(m.content["status"] == ReplyStatus.ABORTED for m in aborted)
    control = [m for part in rig.received(rig.hub) for m in part]
    assert [m.msg_type for m in control] == [MsgType.ABORT_REPLY]


def test_a_failed_execute_aborts_the_executes_queued_behind_it(rig):
    """As ipykernel's stop_on_error: the error goes back first, then each execute_request
    in hand or queued is answered 'aborted'; the apply between them still runs."""
    warm(rig, noop)

    def execute(code):
        header, frames = rig.client.serialize(MsgType.EXECUTE_REQUEST, {"code": code}, dest=UUID)
        return header["msg_id"], frames

    (a, fa), (b, fb), (c, fc), (d, fd) = (
        execute("1 / 0"),
        execute("x = 1"),
        rig.apply(noop),
        execute("x = 2"),
    )
    rig.place(fa, fb, fc)
    rig.place(fd)  # still queued on the socket when a fails
    rig.run_all()
    replies = [m for part in rig.received() for m in part]
    assert [m.parent_header["msg_id"] for m in replies] == [a, b, d, c]
    status = {m.parent_header["msg_id"]: m.content["status"] for m in replies}
    assert status == {
        a: ReplyStatus.ERROR,
        b: ReplyStatus.ABORTED,
        c: ReplyStatus.OK,
        d: ReplyStatus.ABORTED,
    }
    assert "x" not in rig.kernel.ns


def test_an_abort_of_one_task_in_hand_leaves_the_others(rig):
    warm(rig, noop)
    (a, fa), (b, fb), (c, fc) = (rig.apply(noop) for _ in range(3))
    rig.place(fa, fb, fc)
    rig.server.take(rig.task)
    _, abort = rig.client.serialize(MsgType.ABORT_REQUEST, {"msg_ids": [b]}, dest=UUID)
    rig.hub.send_multipart([UUID.encode(), b"client", *abort])
    assert rig.control.poll(5000)
    rig.server.drain_control()
    while rig.server.in_hand:
        rig.server.run_next()
    rig.replies.flush()
    status = {m.parent_header["msg_id"]: m.content["status"] for p in rig.received() for m in p}
    assert status == {a: ReplyStatus.OK, b: ReplyStatus.ABORTED, c: ReplyStatus.OK}


def test_a_revoked_task_of_a_batch_is_dropped_unanswered(rig):
    warm(rig, noop)
    (a, fa), (b, fb), (c, fc) = (rig.apply(noop) for _ in range(3))
    rig.place(fa, fb, fc)
    rig.server.take(rig.task)
    assert rig.gate.revoke([b]) == [b]  # the signal thread's answer to the scheduler
    while rig.server.in_hand:
        rig.server.run_next()
    rig.replies.flush()
    answered = [m.parent_header["msg_id"] for p in rig.received() for m in p]
    assert answered == [a, c]


def test_a_held_reply_leaves_when_the_rest_of_its_batch_is_revoked(rig, patient):
    warm(rig, noop)
    (a, fa), (b, fb), (c, fc) = (rig.apply(noop) for _ in range(3))
    rig.place(fa, fb, fc)
    rig.server.take(rig.task)
    rig.server.run_next()  # a ran; its reply is held for b
    assert rig.replies.held
    rig.gate.revoke([b, c])  # then the scheduler takes b and c back
    while rig.server.in_hand:
        rig.server.run_next()  # no flush by the test: the loop would now sleep
    assert not rig.replies.held
    answered = [m.parent_header["msg_id"] for p in rig.received() for m in p]
    assert answered == [a]


def test_replies_held_together_stay_under_a_byte_bound(rig, patient):
    warm(rig, bulky)
    rig.place(*(rig.apply(bulky)[1] for _ in range(4)))
    rig.run_all()
    # two results of just over half the bound each: the second one sends both
    assert [len(part) for part in rig.received()] == [2, 2]
