"""client.outbox.RequestOutbox: queued requests go out in order per socket, load-balanced ones as
one batch; a request signed private goes on its engine's own socket, without a routing
identity; work past its window waits for replies. Over inproc sockets, no thread."""

from __future__ import annotations

import zmq

from zpar.client.outbox import RequestOutbox
from zpar.client.request import PendingRequest, PendingTable
from zpar.client.window import Windows
from zpar.constants import BATCH_DELIM, DELIM
from zpar.wire import Session, recv_message

KEY = b"outbox-test-key"


class Rig:
    def __init__(self, windows: Windows | None = None) -> None:
        self.ctx = zmq.Context.instance()
        self.session = Session(KEY)
        self.routers: dict[str, zmq.Socket] = {}
        self.sockets: dict[str, zmq.Socket] = {}
        for channel in ("task", "mux", "private"):
            router = self.ctx.socket(zmq.ROUTER)
            addr = f"inproc://outbox-{channel}-{id(self):x}"
            router.bind(addr)
            self.routers[channel] = router
            dealer = self.ctx.socket(zmq.DEALER)
            dealer.connect(addr)
            self.sockets[channel] = dealer
        self.asked: list[tuple[str, str]] = []
        self.pending = PendingTable(windows or Windows())
        self.outbox = RequestOutbox(
            {c: s for c, s in self.sockets.items() if c != "private"},
            self.pending,
            self._private_socket,
        )

    def _private_socket(self, uuid: str, addr: str) -> zmq.Socket:
        self.asked.append((uuid, addr))
        return self.sockets["private"]

    def request(self, channel="task", uuid=None, private=None, windowed=False):
        header, frames = self.session.serialize(
            "apply_request", {}, buffers=[b"call"], dest=uuid or "task", private=bool(private)
        )
        if uuid is not None and private is None:
            frames = [uuid.encode(), *frames]
        r = PendingRequest(
            header["msg_id"], channel, frames, engine_uuid=uuid, private=private, windowed=windowed
        )
        self.pending.add(r)
        self.outbox.put(r)
        return r

    def received(self, channel: str) -> list[list]:
        router, out = self.routers[channel], []
        while router.poll(200):
            out.append(recv_message(router, zmq.NOBLOCK)[1:])  # the DEALER's identity off
        return out

    def close(self) -> None:
        for s in [*self.routers.values(), *self.sockets.values()]:
            s.close(linger=0)


def test_a_private_request_goes_on_its_engines_own_socket_without_an_identity():
    rig = Rig()
    try:
        relayed = rig.request("mux", uuid="e1")
        private = rig.request("mux", uuid="e2", private="ipc:///run/engine-e2")
        rig.outbox.flush()
        assert [m[0] for m in rig.received("mux")] == [b"e1"]
        (got,) = rig.received("private")
        assert got[0] == DELIM  # the engine's own socket: no routing identity
        assert rig.session.for_thread().feed(got, private=True).msg_id == private.msg_id
        assert rig.asked == [("e2", "ipc:///run/engine-e2")]
        assert relayed.sent and private.sent and private.frames is None
    finally:
        rig.close()


def test_queued_task_requests_go_as_one_batch_and_a_function_runs_in_order():
    rig = Rig()
    try:
        first = rig.request()
        seen = []
        rig.outbox.put(lambda: seen.append(first.sent))
        rest = [rig.request() for _ in range(3)]
        rig.outbox.flush()
        got = rig.received("task")
        assert seen and seen[0] is not None  # sent before the function ran
        assert len(got) == 2 and got[1][0].startswith(BATCH_DELIM)  # then one batch
        checked = rig.session.for_thread().feed_all([b"id", *got[1]])
        assert [m.msg_id for m in checked] == [r.msg_id for r in rest]
    finally:
        rig.close()


def test_work_past_its_window_waits_and_goes_first_once_let_out():
    rig = Rig(Windows(limit=1))
    try:
        first, held = rig.request(windowed=True), rig.request(windowed=True)
        rig.outbox.flush()
        assert len(rig.received("task")) == 1 and held.sent is None
        rig.pending.answered(first, first.future)  # a reply makes room
        newer = rig.request()  # not windowed: goes at once, after the one let out
        rig.outbox.flush()
        (got,) = rig.received("task")
        checked = rig.session.for_thread().feed_all([b"id", *got])
        assert [m.msg_id for m in checked] == [held.msg_id, newer.msg_id]
    finally:
        rig.close()
