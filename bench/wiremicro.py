"""Micro-benchmark of the wire's per-message CPU: ``python -m bench.wiremicro [--json]``.

Every step a no-op load-balanced task's messages take through zpar.wire, in one process:
the client serializes an apply_request, the task scheduler checks it and signs it anew for
an engine, the engine checks it and serializes its apply_reply, the scheduler checks the
reply and the client checks it lazily; alone and as batches of 100 (split and checked one
by one, as receivers do). Also the content dataclasses the engine builds per task, and one
socket hop of a lone request over tcp as its frames and packed (pyzmq's cost). Prints
microseconds per call (best of several repeats: the machine is shared, the best is the
least disturbed), each receiver's replay guard full, as in a process that has run a while. For comparing a change before/after in the same minute, not as a target.
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
from collections.abc import Callable
from typing import Any

import zmq

from zpar.constants import REPLAY_HISTORY
from zpar.serialize import pack_apply, serialize_object
from zpar.wire import Session, batch, recv_message, send_frames, split_messages
from zpar.wire.messages import ApplyReply, ReplyStatus

KEY = b"benchmark-key-0123456789abcdef"
ENGINE = "3f1c9a7e-5b2d-4c8e-9a61-0d2f7b4e8c15"


def _noop() -> None:
    return None


def _reply_metadata() -> dict[str, Any]:
    return {
        "engine_id": 0,
        "engine_uuid": ENGINE,
        "started": 1.0,
        "completed": 2.0,
        "status": "ok",
        "stdout": "",
        "stderr": "",
    }


def _steady(receiver: Session) -> None:
    """Fill a receiver's replay guard as a process that has run a while has it (full: each
    new signature makes room for itself)."""
    for i in range(REPLAY_HISTORY + 1):
        receiver.accept(((i + 1) * 0x9E3779B97F4A7C15 % 2**64).to_bytes(8, "little"))


def cases(n_pre: int) -> dict[str, Callable[[], Any]]:
    """name -> a callable doing one step once (each receiver a Session of its own, as each
    process has; replay checks on, so each call checks a message it has not seen: n_pre
    fresh messages per receiving step)."""
    client, sched, engine = Session(KEY), Session(KEY), Session(KEY)
    client_rx, sched_rx = Session(KEY), Session(KEY)
    for receiver in (sched, engine, client_rx, sched_rx):
        _steady(receiver)
    buffers = pack_apply(_noop, (), {})

    # one stream of messages per receiving step, built ahead (a receiver refuses replays)
    def requests(n: int) -> list[list[Any]]:
        return [
            client.serialize("apply_request", {}, buffers=buffers, dest="task")[1] for _ in range(n)
        ]

    reqs = iter(requests(n_pre))
    checked = sched.unpack(client.serialize("apply_request", {}, buffers=buffers, dest="task")[1])
    header = {**checked.header, "dest": ENGINE}
    resigned = iter(
        [client.resign(checked, header={**header, "msg_id": f"m{i}"}) for i in range(n_pre)]
    )
    result = serialize_object(None)

    def reply() -> list[Any]:
        return engine.serialize(
            "apply_reply",
            ApplyReply(ReplyStatus.OK).as_dict(),
            parent=header,
            metadata=_reply_metadata(),
            buffers=result,
        )[1]

    replies = iter([reply() for _ in range(n_pre)])
    replies_c = iter([reply() for _ in range(n_pre)])
    b100 = iter([batch(requests(100)) for _ in range(n_pre // 100)])

    def feed_batch() -> None:
        sched.feed_all([b"client", *next(b100)], "bench")

    return {
        "client: serialize apply_request": lambda: client.serialize(
            "apply_request", {}, buffers=buffers, dest="task"
        ),
        "scheduler: unpack apply_request": lambda: sched.unpack(next(reqs)),
        "scheduler: resign for an engine": lambda: sched.resign(checked, header=header),
        "engine: unpack apply_request": lambda: engine.unpack(next(resigned)),
        "engine: ApplyReply(OK).as_dict()": lambda: ApplyReply(ReplyStatus.OK).as_dict(),
        "engine: serialize apply_reply": reply,
        "scheduler: unpack apply_reply": lambda: sched_rx.unpack(next(replies)),
        "client: feed_lazy_all apply_reply": lambda: client_rx.feed_lazy_all(
            [b"e", *next(replies_c)], "bench"
        ),
        "scheduler: feed_all batch of 100 (per message)": feed_batch,
    }


def measure(number: int = 2000, repeat: int = 5) -> dict[str, float]:
    out = {}
    for name, fn in cases(number * repeat + 100).items():
        n = number // 100 if "batch of 100" in name else number
        best = min(timeit.repeat(fn, number=n, repeat=repeat, timer=time.process_time)) / n
        if "batch of 100" in name:
            best /= 100
        out[name] = best * 1e6
    return out


def socket_hop(number: int = 5000, repeat: int = 3) -> dict[str, float]:
    """CPU per message (this process, its zmq I/O threads included) of sending a no-op
    apply_request over tcp on 127.0.0.1 and receiving it, DEALER to ROUTER, with a window
    of 100 in flight: as its own frames (``[DELIM, signature, envelope, call]``) and as a
    packed batch of one (``[BATCH_DELIM, packed]``, what wire.batch sends)."""
    sender = Session(KEY)
    buffers = pack_apply(_noop, (), {})
    ctx = zmq.Context()
    tx, rx = ctx.socket(zmq.DEALER), ctx.socket(zmq.ROUTER)
    for s in (tx, rx):
        s.setsockopt(zmq.LINGER, 0)
    port = rx.bind_to_random_port("tcp://127.0.0.1")
    tx.connect(f"tcp://127.0.0.1:{port}")
    layouts: dict[str, Callable[[list[Any]], list[Any]]] = {
        "socket hop: lone message as its frames": list,
        "socket hop: lone message packed (batch of one)": lambda m: batch([m]),
    }
    out: dict[str, float] = {}
    try:
        for _ in range(repeat):
            for name, layout in layouts.items():
                msgs = [
                    layout(sender.serialize("apply_request", {}, buffers=buffers)[1])
                    for _ in range(number)
                ]
                t0 = time.process_time()
                sent = got = 0
                while got < number:
                    while sent < number and sent - got < 100:
                        send_frames(tx, msgs[sent])
                        sent += 1
                    split_messages(recv_message(rx))
                    got += 1
                us = (time.process_time() - t0) / number * 1e6
                out[name] = min(us, out.get(name, us))
    finally:
        tx.close()
        rx.close()
        ctx.term()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--number", type=int, default=2000)
    args = p.parse_args()
    res = measure(args.number)
    res.update(socket_hop())
    if args.json:
        print(json.dumps(res))
        return
    for name, us in res.items():
        print(f"{us:8.2f} us  {name}")


if __name__ == "__main__":
    main()
