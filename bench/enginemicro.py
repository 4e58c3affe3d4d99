"""Micro-benchmark of an engine's CPU per no-op task: ``python -m bench.enginemicro [--json]``.

One engine's serving loop (engine.serving.Server) in this process, its task socket over
inproc: batches of 8 signed no-op apply_requests are queued first, then the engine takes,
checks, runs and answers them as in W3, and the process's CPU time (every thread: the
held-replies watchdog included) is divided by the tasks. Measured with replies held
together (the default) and sent one by one, and the parts every task pays: checking the
request, running it (kernel), building and signing the reply, and pyzmq's send. Best of
several repeats (the machine is shared); for before/after in the same minute.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import zmq

from zpar.engine.iopub import IOPub
from zpar.engine.kernel import Kernel
from zpar.engine.replies import ReplySender
from zpar.engine.revoke import RevokeGate
from zpar.engine.serving import RunState, Server, Sockets
from zpar.serialize import pack_apply
from zpar.wire import Session, batch, send_frames, split_messages
from zpar.wire.messages import MsgType

KEY = b"benchmark-key-0123456789abcdef"
ENGINE = "3f1c9a7e-5b2d-4c8e-9a61-0d2f7b4e8c15"
#: tasks per multipart, as the task scheduler sends a loaded engine (TASK_HWM_LOADED)
BATCH = 8


def _noop() -> None:
    return None


class Rig:
    """A Server on inproc sockets and the scheduler's end of its task socket."""

    def __init__(self, ctx: zmq.Context, tag: int) -> None:
        self.client = Session(KEY)
        self.scheduler = ctx.socket(zmq.ROUTER)
        self.scheduler.setsockopt(zmq.SNDHWM, 0)
        self.scheduler.setsockopt(zmq.RCVHWM, 0)
        self.scheduler.bind(f"inproc://bench-task-{tag}")

        def dealer(addr: str) -> zmq.Socket:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, ENGINE.encode())
            s.setsockopt(zmq.SNDHWM, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.connect(addr)
            return s

        self.task = dealer(f"inproc://bench-task-{tag}")
        control = dealer(f"inproc://bench-control-{tag}")
        mux = dealer(f"inproc://bench-mux-{tag}")
        xpub = ctx.socket(zmq.XPUB)
        xpub.bind(f"inproc://bench-iopub-{tag}")
        self.session = Session(KEY)
        iopub = IOPub(xpub, self.session, None)
        self.kernel = Kernel(0, ENGINE, publish=iopub.publish)
        self.replies = ReplySender(self.session, 0, ENGINE)
        self.server = Server(
            engine_id=0,
            engine_uuid=ENGINE,
            session=self.session,
            kernel=self.kernel,
            sockets=Sockets(control, mux, self.task, ctx.socket(zmq.SUB)),
            iopub=iopub,
            replies=self.replies,
            state=RunState(),
            gate=RevokeGate(),
        )

    def requests(self, n: int) -> list[list[Any]]:
        out = []
        for _ in range(n):
            _, frames = self.client.serialize(
                MsgType.APPLY_REQUEST, {}, buffers=pack_apply(_noop), dest=ENGINE
            )
            out.append(frames)
        return out

    def queue(self, n: int) -> None:
        reqs = self.requests(n)
        for i in range(0, n, BATCH):
            self.scheduler.send_multipart([ENGINE.encode(), b"client", *batch(reqs[i : i + BATCH])])

    def serve(self, n: int) -> None:
        """Take and run n tasks as the loop does (control never ready here)."""
        server = self.server
        while server.taken_requests < n:
            server.take(self.task)
            while server.in_hand:
                server.run_next()

    def drain(self) -> int:
        """Replies received at the scheduler's end."""
        got = 0
        while self.scheduler.poll(0):
            _, messages = split_messages(self.scheduler.recv_multipart())
            got += len(messages)
        return got


def _cpu_per_task(hold: bool, number: int, repeat: int) -> tuple[float, float]:
    """(best us of CPU per task, replies per multipart) for the whole engine loop."""
    best = float("inf")
    per_multipart = 0.0
    for r in range(repeat):
        ctx = zmq.Context()
        rig = Rig(ctx, r * 2 + hold)
        if not hold:
            rig.server._next_is_same = lambda sock: False  # type: ignore[method-assign]
        rig.queue(BATCH * 4)
        rig.serve(BATCH * 4)  # warm: first run of the function, imports
        rig.drain()
        rig.server.taken_requests = 0
        rig.replies.sent_multiparts = rig.replies.sent_replies = 0
        rig.queue(number)
        t = time.process_time()
        rig.serve(number)
        cpu = time.process_time() - t
        got = rig.drain()
        assert got == number, f"{got} of {number} replies"
        best = min(best, cpu / number * 1e6)
        per_multipart = rig.replies.sent_replies / max(1, rig.replies.sent_multiparts)
        rig.replies.watchdog.close()
        ctx.destroy(linger=0)
    return best, per_multipart


def _ident(x: Any) -> Any:
    return x


def _cpu_per_map(maps: int, repeat: int, size: int = 1000) -> float:
    """Best us of CPU per element request of ``size`` identity calls (an engine's half of
    a W4 map of 2,000), the whole engine loop: run, parts (values, dates), sends."""
    best = float("inf")
    for r in range(repeat):
        ctx = zmq.Context()
        rig = Rig(ctx, 500 + r)
        buffers = pack_apply(_noop, (_ident, list(range(size))), {})

        def queue(n: int, rig: Rig = rig, buffers: list[Any] = buffers) -> None:
            for _ in range(n):
                _, frames = rig.client.serialize(
                    MsgType.APPLY_REQUEST,
                    {},
                    metadata={"elements": [0, size]},
                    buffers=buffers,
                    dest=ENGINE,
                )
                rig.scheduler.send_multipart([ENGINE.encode(), b"client", *batch([frames])])

        queue(3)
        rig.serve(3)  # warm
        rig.drain()
        rig.server.taken_requests = 0
        queue(maps)
        t = time.process_time()
        rig.serve(maps)
        rig.replies.flush()
        cpu = time.process_time() - t
        assert rig.drain() >= maps
        best = min(best, cpu / maps * 1e6)
        rig.replies.watchdog.close()
        ctx.destroy(linger=0)
    return best


def _parts(number: int, repeat: int) -> dict[str, float]:
    """us per task of the steps the engine loop takes for each task."""
    ctx = zmq.Context()
    rig = Rig(ctx, 1000)
    figures: dict[str, float] = {}

    def best(name: str, fn: Callable[[Any], Any], setup: Callable[[], Any]) -> None:
        times = []
        for _ in range(repeat):
            state = setup()
            t = time.process_time()
            fn(state)
            times.append((time.process_time() - t) / number * 1e6)
        figures[name] = min(times)

    engine = rig.session
    requests = lambda: rig.requests(number)  # noqa: E731
    best(
        "check a request (verify, decode, replay)",
        lambda reqs: [engine.unpack(f, [b"client"]) for f in reqs],
        requests,
    )
    messages = lambda: [engine.unpack(f, [b"client"]) for f in rig.requests(number)]  # noqa: E731
    best(
        "run it (kernel.handle: unpickle, call, pickle)",
        lambda ms: [rig.kernel.handle(m) for m in ms],
        messages,
    )
    replied = lambda: [(m, rig.kernel.handle(m)) for m in messages()]  # noqa: E731
    best(
        "build and sign its reply (Session.serialize)",
        lambda pairs: [rig.replies._frames(m, r, False) for m, r in pairs],
        replied,
    )
    frames = lambda: [rig.replies._frames(m, r, False) for m, r in replied()]  # noqa: E731
    ident = [ENGINE.encode()]

    def send_batched(fs: list[list[Any]]) -> None:
        for i in range(0, len(fs), BATCH):
            send_frames(rig.task, [*ident, *batch(fs[i : i + BATCH])])

    best("send replies in batches of 8 (batch + pyzmq)", send_batched, frames)
    rig.drain()
    best(
        "send replies one by one (pyzmq)",
        lambda fs: [send_frames(rig.task, [*ident, *f]) for f in fs],
        frames,
    )
    rig.drain()
    ctx.destroy(linger=0)
    return figures


def run(number: int = 4000, repeat: int = 5) -> dict[str, float]:
    held, together = _cpu_per_task(True, number, repeat)
    alone, one = _cpu_per_task(False, number, repeat)
    figures = {
        "engine loop per task, replies held together": held,
        "replies per multipart, held together": together,
        "engine loop per task, replies one by one": alone,
        "replies per multipart, one by one": one,
    }
    figures["engine loop per element request of 1,000 (W4's half)"] = _cpu_per_map(
        max(20, number // 100), repeat
    )
    figures.update(_parts(number, repeat))
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    p.add_argument("--number", type=int, default=4000, help="tasks per repeat")
    args = p.parse_args()
    figures = run(args.number)
    if args.json:
        print(json.dumps({k: round(v, 2) for k, v in figures.items()}))
        return
    for name, v in figures.items():
        print(f"{name:52s} {v:7.2f}{'' if 'multipart' in name else ' us'}")


if __name__ == "__main__":
    main()
