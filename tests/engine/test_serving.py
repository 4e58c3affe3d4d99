"""The engine's serving loop over in-process sockets: batches of requests checked one by
one, replies of quick tasks sent together, never a reply held behind a slow task, and
abort / revoke reaching the tasks in hand."""

from __future__ import annotations

import itertools
import time

import pytest
import zmq

from zpar.engine.iopub import IOPub
from zpar.engine.kernel import Kernel
from zpar.engine.replies import HELD_BYTES_MAX, ReplySender
from zpar.engine.revoke import RevokeGate
from zpar.engine.serving import RunState, Server, Sockets
from zpar.messages import MsgType, Status
from zpar.serialize import deserialize_object, pack_apply
from zpar.wire import Session, batch, split_messages

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


#: QUICK_RUN for the tests of predictions (off by default: docs/decisions.md)
PREDICTING = 0.0005


@pytest.fixture
def predicting(monkeypatch):
    monkeypatch.setattr("zpar.engine.kernel.QUICK_RUN", PREDICTING)


def sleepy():
    time.sleep(PREDICTING * 100)


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

    def apply(self, f, dest: str = UUID, **metadata) -> tuple[str, list]:
        header, frames = self.client.serialize(
            MsgType.APPLY_REQUEST, {}, buffers=pack_apply(f), metadata=metadata, dest=dest
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
    ctx.destroy(linger=0)


def warm(rig: Rig, f) -> None:
    """Run f once alone, so the engine knows it as quick (or not)."""
    rig.place(rig.apply(f)[1])
    rig.run_all()
    assert len(rig.received()) == 1


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


def test_replies_of_quick_tasks_of_a_batch_go_back_together_in_order(rig, monkeypatch):
    # "quick" is measured: on a loaded host a no-op can be preempted past QUICK_RUN
    monkeypatch.setattr("zpar.engine.kernel.QUICK_RUN", 60.0)
    warm(rig, noop)
    ids, frames = zip(*(rig.apply(noop) for _ in range(5)), strict=True)
    rig.place(*frames)
    rig.run_all()
    got = rig.received()
    assert len(got) == 1  # one multipart: a batch of the five replies
    assert [m.parent_header["msg_id"] for m in got[0]] == list(ids)
    assert all(m.content["status"] == Status.OK for m in got[0])


def test_by_default_no_reply_waits_for_the_next_task_of_its_batch(rig):
    """Predictions are off: a function quick so far may turn slow (decisions.md)."""
    warm(rig, noop)
    ids, frames = zip(*(rig.apply(noop) for _ in range(3)), strict=True)
    rig.place(*frames)
    rig.run_all()
    got = rig.received()
    assert [[m.parent_header["msg_id"] for m in part] for part in got] == [[i] for i in ids]
    assert not rig.kernel.slowest  # nothing estimated while off


def test_a_reply_never_waits_behind_a_task_not_known_quick(rig, predicting):
    warm(rig, noop)
    first, a = rig.apply(noop)
    second, b = rig.apply(replies_arrived_before_me)  # never run here: not known quick
    rig.place(a, b)
    rig.run_all()
    got = rig.received()
    assert [[m.parent_header["msg_id"] for m in part] for part in got] == [[first], [second]]
    reply = got[1][0]
    # the test's poll inside the task consumed nothing: it only saw the first reply waiting
    assert deserialize_object(reply.buffers) is True


def test_a_slow_function_is_not_predicted_quick_until_its_runs_are_quick_again(rig, predicting):
    kernel = rig.kernel
    warm(rig, sleepy)
    rig.place(rig.apply(sleepy)[1], rig.apply(sleepy)[1])
    rig.run_all()
    assert [len(part) for part in rig.received()] == [1, 1]  # each sent at once
    assert kernel.slowest[sleepy] >= PREDICTING


def test_quick_predictions(rig, monkeypatch):
    monkeypatch.setattr("zpar.engine.kernel.QUICK_RUN", 1.0)  # a no-op preempted stays quick
    kernel = rig.kernel
    session = Session(KEY)

    def msg(f=noop, msg_type=MsgType.APPLY_REQUEST, **metadata):
        _, frames = rig.client.serialize(
            msg_type, {}, buffers=pack_apply(f), metadata=metadata, dest=UUID
        )
        return session.unpack(frames, [b"client"])

    assert not kernel.quick(msg())  # never run here
    kernel.handle(msg())
    assert kernel.quick(msg())
    assert not kernel.quick(msg(time_limit=5))  # a limited task always flushes first
    assert not kernel.quick(msg(msg_type=MsgType.EXECUTE_REQUEST))
    kernel.slowest[noop] = 3.0  # one long run: unknown-length again for a while
    assert not kernel.quick(msg())
    for _ in range(20):
        kernel.handle(msg())
    assert kernel.quick(msg())


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
    assert all(m.content["status"] == Status.ABORTED for m in aborted)
    control = [m for part in rig.received(rig.hub) for m in part]
    assert [m.msg_type for m in control] == [MsgType.ABORT_REPLY]


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
    assert status == {a: Status.OK, b: Status.ABORTED, c: Status.OK}


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


def test_a_held_reply_leaves_when_the_rest_of_its_batch_is_revoked(rig, monkeypatch):
    monkeypatch.setattr("zpar.engine.kernel.QUICK_RUN", 60.0)
    warm(rig, noop)
    (a, fa), (b, fb), (c, fc) = (rig.apply(noop) for _ in range(3))
    rig.place(fa, fb, fc)
    rig.server.take(rig.task)
    rig.server.run_next()  # a ran; its reply is held for b, predicted quick
    assert rig.replies.held
    rig.gate.revoke([b, c])  # then the scheduler takes b and c back
    while rig.server.in_hand:
        rig.server.run_next()  # no flush by the test: the loop would now sleep
    assert not rig.replies.held
    answered = [m.parent_header["msg_id"] for p in rig.received() for m in p]
    assert answered == [a]


def test_replies_held_together_stay_under_a_byte_bound(rig, monkeypatch):
    monkeypatch.setattr("zpar.engine.kernel.QUICK_RUN", 60.0)
    warm(rig, bulky)
    rig.place(*(rig.apply(bulky)[1] for _ in range(4)))
    rig.run_all()
    # two results of just over half the bound each: the second one sends both
    assert [len(part) for part in rig.received()] == [2, 2]
