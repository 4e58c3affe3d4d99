"""The client's I/O thread owns one PendingRequest per call: it coalesces queued load-balanced
requests into one batch, sends a lone one as itself, and routes replies (batched or not)
to the right future. Driven without its thread, over inproc sockets."""

from __future__ import annotations

import zmq

from zpar.client.ioloop import ClientIO
from zpar.client.request import PendingRequest, request_of
from zpar.constants import BATCH_DELIM, DELIM
from zpar.wire import Session, batch, recv_message

KEY = b"clientio-test-key"


class Harness:
    """A ClientIO whose task and mux channels reach ROUTERs this test reads."""

    def __init__(self) -> None:
        self.ctx = zmq.Context.instance()
        self.session = Session(KEY)
        self.io = ClientIO(self.session, self.ctx)
        self.routers = {}
        for channel in ("task", "mux"):
            router = self.ctx.socket(zmq.ROUTER)
            addr = f"inproc://clientio-{channel}-{id(self):x}"
            router.bind(addr)
            self.io.connect(channel, addr)
            self.routers[channel] = router

    def request(self, channel: str = "task", track: bool = False, uuid: str | None = None):
        header, frames = self.session.serialize(
            "apply_request", {}, buffers=[b"call"], dest=uuid or "task"
        )
        if uuid is not None:
            frames = [uuid.encode(), *frames]
        return (
            PendingRequest(
                header["msg_id"], channel, frames, engine_uuid=uuid, submitted=header["date"]
            )
            if not track
            else PendingRequest(header["msg_id"], channel, frames, track=True)
        )

    def received(self, channel: str) -> list[list]:
        router, out = self.routers[channel], []
        while router.poll(200):
            out.append(recv_message(router, zmq.NOBLOCK))
        return out

    def reply_to(self, request: PendingRequest, engine: bytes = b"engine-1") -> list:
        _, frames = self.session.serialize(
            "apply_reply", {"status": "ok"}, parent={"msg_id": request.msg_id, **_header()}
        )
        return [engine, *frames]

    def close(self) -> None:
        for s in [*self.routers.values(), *self.io._sockets.values()]:
            s.close(linger=0)


def _header():
    return {"msg_type": "apply_request", "session": "s", "date": 1.0, "version": "2.0"}


def test_queued_task_requests_go_as_one_batch_and_each_is_checked_on_its_own():
    h = Harness()
    try:
        requests = [h.io.submit(h.request()) for _ in range(5)]
        assert h.io.outstanding() == {r.msg_id for r in requests}
        h.io.outbox.flush()
        (got,) = h.received("task")  # one multipart for five requests
        assert len(got) == 2 and got[1].startswith(BATCH_DELIM)  # packed: one frame
        checked = Session(KEY).feed_all(got)
        assert [m.msg_id for m in checked] == [r.msg_id for r in requests]
        assert all(r.sent is not None and r.frames is None for r in requests)
    finally:
        h.close()


def test_a_lone_request_goes_at_once_as_a_batch_of_one():
    h = Harness()
    try:
        r = h.io.submit(h.request())
        h.io.outbox.flush()
        (got,) = h.received("task")  # small: packed in one frame (wire.batch)
        assert len(got) == 2 and got[1].startswith(BATCH_DELIM)
        assert Session(KEY).feed(got).msg_id == r.msg_id
    finally:
        h.close()


def test_direct_requests_and_tracked_ones_are_not_batched():
    h = Harness()
    try:
        direct = [h.io.submit(h.request("mux", uuid="engine-1")) for _ in range(2)]
        tracked = h.io.submit(h.request(track=True))
        plain = [h.io.submit(h.request()) for _ in range(2)]
        h.io.outbox.flush()
        mux = h.received("mux")
        assert [m[1] for m in mux] == [b"engine-1"] * 2 and mux[0][2] == DELIM
        task = h.received("task")
        # tracked alone, then a batch
        assert [m[1][: len(BATCH_DELIM)] for m in task] == [DELIM, BATCH_DELIM]
        assert tracked.trackers == [] and all(r.sent for r in [*direct, *plain])
    finally:
        h.close()


def test_a_call_soon_runs_after_what_was_queued_before_it_was_sent():
    h = Harness()
    try:
        first = h.io.submit(h.request())
        seen = []
        h.io.call_soon(lambda: seen.append(first.sent))
        h.io.submit(h.request())
        h.io.outbox.flush()
        assert seen and seen[0] is not None
        assert len(h.received("task")) == 2  # the function split the run in two
    finally:
        h.close()


def test_replies_batched_or_not_resolve_their_requests_and_only_once():
    h = Harness()
    try:
        requests = [h.io.submit(h.request()) for _ in range(3)]
        h.io.outbox.flush()
        replies = [h.reply_to(r) for r in requests]
        frames = [b"engine-1", *batch([f[1:] for f in replies])]
        h.io._answer(h.session.for_thread().feed_lazy_all(frames))
        assert all(r.future.done() for r in requests) and not h.io.outstanding()
        assert [r.future.result().parent_msg_id for r in requests] == [r.msg_id for r in requests]
        # a resolved future lets go of its PendingRequest (no cycle outlives the reply) and keeps
        # what its result reports
        first = requests[0]
        assert request_of(first.future) is None and first.future.submitted == first.submitted
        h.io._answer([h.session.for_thread().feed_lazy(replies[0])])  # a second reply
        assert requests[0].future.result().content == {"status": "ok"}
    finally:
        h.close()


def test_a_broadcast_waits_for_each_engine_and_an_engine_death_fails_its_part():
    h = Harness()
    try:
        header, frames = h.session.serialize("apply_request", {}, dest="task")
        r = h.io.submit(PendingRequest(header["msg_id"], "task", frames, broadcast=["e1", "e2"]))
        h.io.outbox.flush()
        h.io._answer([h.session.for_thread().feed_lazy(h.reply_to(r, b"e1"))])
        assert r.replies["e1"].done() and not r.replies["e2"].done()
        assert h.io.outstanding() == {r.msg_id}
        h.io.pending.engine_died(2, "e2", "test")
        assert isinstance(r.replies["e2"].exception(), Exception)
        assert not h.io.outstanding()
    finally:
        h.close()
