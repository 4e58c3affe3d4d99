"""Micro-benchmark of the wire's per-message CPU: ``python -m bench.wiremicro [--json]``.

Every step a no-op load-balanced task's messages take through zpar.wire, in one process:
the client serializes an apply_request, the task scheduler checks it and signs it anew for
an engine, the engine checks it and serializes its apply_reply, the scheduler checks the
reply and the client checks it lazily; alone and as batches of 100 (split and checked one
by one, as receivers do). Also the content dataclasses the engine builds per task. Prints
microseconds per call (best of several repeats: the machine is shared, the best is the
least disturbed). For comparing a change before/after in the same minute, not as a target.
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
from collections.abc import Callable
from typing import Any

from zpar.messages import ApplyReply, Status
from zpar.serialize import pack_apply, serialize_object
from zpar.wire import Session, batch

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


def cases(n_pre: int) -> dict[str, Callable[[], Any]]:
    """name -> a callable doing one step once (each receiver a Session of its own, as each
    process has; replay checks on, so each call checks a message it has not seen: n_pre
    fresh messages per receiving step)."""
    client, sched, engine = Session(KEY), Session(KEY), Session(KEY)
    client_rx, sched_rx = Session(KEY), Session(KEY)
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
            ApplyReply(Status.OK).as_dict(),
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
        "engine: ApplyReply(OK).as_dict()": lambda: ApplyReply(Status.OK).as_dict(),
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--number", type=int, default=2000)
    args = p.parse_args()
    res = measure(args.number)
    if args.json:
        print(json.dumps(res))
        return
    for name, us in res.items():
        print(f"{us:8.2f} us  {name}")


if __name__ == "__main__":
    main()
