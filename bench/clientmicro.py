"""Micro-benchmark of the client's own per-task CPU: ``python -m bench.clientmicro [--json]``.

What a no-op load-balanced task costs the client in the user's thread, in one process and
without a cluster: ``apply_async`` through a LoadBalancedView up to the Request handed to
the I/O thread (pickling the call, the view's metadata, signing, the Request, the
AsyncResult), and reading its result: the I/O thread's part for one reply (check, route,
resolve the future) and ``ar.get()``. The wire's share of these is bench.wiremicro's.
Prints microseconds per task (best of several repeats: the machine is shared, the best is
the least disturbed). For comparing a change before/after in the same minute, not as a
target.
"""

from __future__ import annotations

import argparse
import collections
import json
import timeit
from types import SimpleNamespace
from typing import Any

from zpar.client.asyncresult import AsyncResult
from zpar.client.directcall import DirectCaller
from zpar.client.ioloop import ClientIO
from zpar.client.sender import RequestSender
from zpar.client.view import LoadBalancedView
from zpar.serialize import pack_apply, serialize_object
from zpar.wire import Session

from .tasks import noop
from .wiremicro import KEY, _reply_metadata


def _client(session: Session) -> tuple[Any, ClientIO]:
    """A client that only sends: its I/O thread is never started, so what is submitted
    stays in its outbox (cleared between repeats)."""
    io = ClientIO(session)
    sender = RequestSender(session, io, DirectCaller(io, session), collections.deque(), "bench")
    return SimpleNamespace(sender=sender), io


def run(number: int = 2000, repeat: int = 7) -> dict[str, float]:
    session = Session(KEY)
    client, io = _client(session)
    view = LoadBalancedView(client)
    engine = Session(KEY)
    metadata = _reply_metadata()
    result = serialize_object(None)

    def submit_all() -> list[Any]:
        return [view.apply_async(noop) for _ in range(number)]

    def answers(ars: list[Any]) -> list[list[Any]]:
        """The engine's replies to these requests, signed, as the client receives them."""
        out = []
        for ar in ars:
            parent = {"msg_id": ar.msg_ids[0], "msg_type": "apply_request"}
            _, frames = engine.serialize(
                "apply_reply", {"status": "ok"}, parent=parent, metadata=metadata, buffers=result
            )
            out.append(frames)
        return out

    def reset() -> None:
        io.outbox._queue.clear()
        io.pending.requests.clear()

    figures: dict[str, float] = {}

    def best(name: str, fn: Any, setup: Any = None) -> None:
        times = []
        for _ in range(repeat):
            state = setup() if setup is not None else None
            timer = timeit.Timer(lambda state=state: fn(state))
            times.append(timer.timeit(number=1) / number * 1e6)
            reset()
        figures[name] = min(times)

    best("pack_apply(noop)", lambda _: [pack_apply(noop, (), {}) for _ in range(number)])
    best("view metadata", lambda _: [view._metadata() for _ in range(number)])
    best("apply_async (user thread, to the I/O thread's outbox)", lambda _: submit_all())

    def replied() -> tuple[list[Any], list[list[Any]]]:
        ars = submit_all()
        return ars, answers(ars)

    def read_replies(state: tuple[list[Any], list[list[Any]]]) -> None:
        ars, replies = state
        for frames in replies:  # the I/O thread's part, as ClientIO._on_reply does it
            io._answer(session.feed_all(frames, where="bench"))
        for ar in ars:
            ar.get()

    best("reply checked, routed and read (I/O thread + ar.get())", read_replies, replied)

    def held_results() -> list[Any]:
        ars = submit_all()
        for frames in answers(ars):
            io._answer(session.feed_all(frames, where="bench"))
        return ars

    best("ar.get() of a result in", lambda ars: [ar.get() for ar in ars], held_results)
    best(
        "AsyncResult of one call",
        lambda ars: [AsyncResult(client, a.msg_ids, a._futures, single=True) for a in ars],
        held_results,
    )
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    p.add_argument("--number", type=int, default=2000, help="tasks per repeat")
    args = p.parse_args()
    figures = run(args.number)
    if args.json:
        print(json.dumps({k: round(v, 2) for k, v in figures.items()}))
        return
    for name, us in figures.items():
        print(f"{name:58s} {us:7.2f} us")


if __name__ == "__main__":
    main()
