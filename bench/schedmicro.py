"""The task scheduler's and the hub's CPU per load-balanced task, and their floors:
``python -m bench.schedmicro [--json] [--tasks N] [--repeat R]``.

Five measures, each the CPU of the measured code's own thread (time.thread_time), best of
``--repeat`` runs (the machine is shared: the best run is the least disturbed). For
comparing a change before/after in the same minute, not as a target.

- ``floor``: the bare recv + verify (Session.unpack) + re-sign + batch + send of one task
  that came in a batch of 8, and the recv + verify + send of its reply, through pyzmq over
  tcp on loopback; nothing else (no book, quota, hub copy). Replies alone (one multipart
  each) or in batches of 8. What any Python scheduler on this wire pays.
- ``scheduler``: TaskScheduler's handlers (verify, book, re-sign, outbox, hub copies) fed
  batches of 8 submissions and one reply per task, its sends replaced by no-ops: the
  scheduler's Python without pyzmq. ``scheduler_map``: the same for a map's element
  requests (32 elements each), each answered in 4 parts, the last final: µs per part,
  the path of a load-balanced map's replies (ElementParts.reply).
- ``hub``: the hub's MonitorReader.task_batch fed the scheduler's event batches (as
  HubReport sends them for W3), its store (an SQLite file) flushed as the controller does.
- ``sqlite``: the store's floor per record: the upsert alone, the three JSON columns alone,
  the result buffer's row.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
import uuid
from array import array
from collections.abc import Callable
from typing import Any

import zmq

from zpar.hub.heartmonitor import HeartMonitor
from zpar.hub.hub import Addresses, Hub
from zpar.hub.stores import open_store
from zpar.hub.stores.sqlite import _INSERT_BUFFER, _UPSERT, DDL, _params
from zpar.schedulers import task as task_module
from zpar.schedulers.events import Delivered, EngineJoined
from zpar.schedulers.hubreport import HubReport
from zpar.schedulers.task import TaskScheduler
from zpar.serialize import pack_apply, serialize_object
from zpar.wire import Session, batch, recv_message, send_frames, split_messages
from zpar.wire.messages import ApplyReply, ReplyStatus
from zpar.wire.monitor import TaskDest, TaskIn, TaskOut

try:  # per-element dates: not in the trees before issue 24 (compared in paired runs)
    from zpar.elements import ELEMENTS, TIMES, pack_times
except ImportError:
    ELEMENTS, TIMES, pack_times = "elements", "element_times", None

KEY = b"benchmark-key-0123456789abcdef"
BATCH = 8
ENGINE = "3f1c9a7e-5b2d-4c8e-9a61-0d2f7b4e8c15"


def _reply_metadata() -> dict[str, Any]:
    now = time.time()
    return {
        "engine_id": 0,
        "engine_uuid": ENGINE,
        "started": now,
        "completed": now,
        "status": "ok",
        "stdout": "",
        "stderr": "",
    }


def _best(run: Callable[[], float], repeat: int) -> float:
    return min(run() for _ in range(repeat))


# -- floor ----------------------------------------------------------------------------------


def floor(tasks: int, repeat: int, replies_batched: bool) -> float:
    """us of scheduler CPU per task (see the module's doc)."""
    ctx = zmq.Context()
    socks = []

    def pair(ident: bytes) -> tuple[zmq.Socket, zmq.Socket]:
        router = ctx.socket(zmq.ROUTER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, ident)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        socks.extend((router, dealer))
        return router, dealer

    to_clients, client = pair(b"C")
    to_engines, engine = pair(b"E")
    client_s, sched_s, engine_s = Session(KEY), Session(KEY), Session(KEY)
    buffers = pack_apply(len, ((),), {})
    result = serialize_object(None)

    def one_batch() -> float:
        reqs = [
            client_s.serialize("apply_request", {}, buffers=buffers, dest="task")[1]
            for _ in range(BATCH)
        ]
        client.send_multipart(batch(reqs))
        to_clients.poll(5000)
        t = time.thread_time()
        idents, messages = split_messages(recv_message(to_clients))
        out = []
        for m in messages:
            msg = sched_s.unpack(m, idents)
            out.append(sched_s.resign(msg, header={**msg.header, "dest": "E"}))
        send_frames(to_engines, [b"E", b"C", *batch(out)])
        cpu = time.thread_time() - t
        _, placed = split_messages(engine.recv_multipart())
        replies = []
        for m in placed:
            request = engine_s.unpack(m, replay=False)
            replies.append(
                engine_s.serialize(
                    "apply_reply",
                    ApplyReply(ReplyStatus.OK).as_dict(),
                    parent=request.header,
                    metadata=_reply_metadata(),
                    buffers=result,
                )[1]
            )
        if replies_batched:
            engine.send_multipart([b"C", *batch(replies)])
        else:
            for r in replies:
                engine.send_multipart([b"C", *r])
        relayed: list[Any] = []
        while len(relayed) < BATCH:
            to_engines.poll(5000)
            t = time.thread_time()
            while True:
                try:
                    frames = recv_message(to_engines, zmq.NOBLOCK)
                except zmq.Again:
                    break
                idents, messages = split_messages(frames)
                relayed += [sched_s.unpack(m, idents).frames for m in messages]
            cpu += time.thread_time() - t
        t = time.thread_time()
        send_frames(to_clients, [b"C", b"E", *batch(relayed)])
        cpu += time.thread_time() - t
        client.recv_multipart()
        return cpu

    try:
        time.sleep(0.2)  # the connections
        for _ in range(20):
            one_batch()
        rounds = max(1, tasks // BATCH)
        return (
            _best(lambda: sum(one_batch() for _ in range(rounds)) / (rounds * BATCH), repeat) * 1e6
        )
    finally:
        for s in socks:
            s.close(linger=0)
        ctx.term()


# -- the scheduler's Python -----------------------------------------------------------------


class _NoSocket:
    def send_multipart(self, frames: list[Any]) -> None:
        pass

    def close(self, linger: int = 0) -> None:
        pass


def scheduler(tasks: int, repeat: int, parts: int = 0) -> dict[str, float]:
    """us per task: submissions (verify, quota, book, first placements) and replies
    (verify, book, relay, hub copy, the placements they make room for). ``parts``: each
    request is instead an element request of a map (``parts`` * PART_ELEMENTS elements)
    answered in ``parts`` parts, the last final; us per part (``tasks`` parts in all)."""
    ctx = zmq.Context()
    mon = ctx.socket(zmq.PULL)
    mon.bind("inproc://schedmicro-monitor")
    sched = TaskScheduler(
        Session(KEY), monitor="inproc://schedmicro-monitor", events="inproc://sm-ev", context=ctx
    )
    sent: list[list[Any]] = []
    real_send = task_module.send_frames
    task_module.send_frames = lambda sock, frames, trackers=None: sent.append(frames)
    sched.link.send = lambda client, frames: None  # type: ignore[method-assign]
    sched.hub.socket.close(linger=0)
    sched.hub.socket = _NoSocket()  # type: ignore[assignment]
    client_s, engine_s = Session(KEY), Session(KEY)
    engines = [str(uuid.uuid4()).encode() for _ in range(2)]
    sched._feed(*(EngineJoined(i, u) for i, u in enumerate(engines)))
    sched._feed(*(Delivered(sched.book.engines[u]) for u in engines))
    buffers = pack_apply(len, ((),), {})
    result = serialize_object(None)

    def reply_to(frames: list[Any]) -> list[list[Any]]:
        idents, messages = split_messages(frames)
        out = []
        for m in messages:
            request = engine_s.unpack(m, replay=False)
            if request.header.get("msg_type") != "apply_request":
                continue  # a revoke_request (an idle engine's steal): its elements answered
            rng = request.metadata.get(ELEMENTS)
            for content in _part_contents(rng) if rng else [ApplyReply(ReplyStatus.OK).as_dict()]:
                _, reply = engine_s.serialize(
                    "apply_reply",
                    content,
                    parent=request.header,
                    metadata=_reply_metadata(),
                    buffers=result,
                )
                out.append([idents[0], idents[1], *reply])
        return out

    # what the loop's drain does with a message: the Intake's events fed to the book (in
    # trees before schedulers/intake.py, the loop's own handlers did both)
    intake = getattr(sched, "intake", None)
    if intake is None:
        submitted, replied = sched._on_submission, sched._on_reply
    else:
        submitted = lambda f: sched._feed(*intake.submissions(f))  # noqa: E731
        replied = lambda f: sched._feed(*intake.replies(f))  # noqa: E731

    def run(n: int) -> dict[str, float]:
        md = {ELEMENTS: [0, parts * PART_ELEMENTS]} if parts else None
        reqs = [
            client_s.serialize("apply_request", {}, buffers=buffers, dest="task", metadata=md)[1]
            for _ in range(n // (parts or 1))
        ]
        cpu = {"submit": 0.0, "reply": 0.0}
        for i in range(0, len(reqs), BATCH):
            t = time.thread_time()
            submitted([b"client", *batch(reqs[i : i + BATCH])])
            sched._carry_out()
            cpu["submit"] += time.thread_time() - t
            while sent:
                replies = [r for frames in sent for r in reply_to(frames)]
                sent.clear()
                t = time.thread_time()
                for r in replies:
                    replied(r)
                    sched._carry_out()
                sched.hub.flush()
                cpu["reply"] += time.thread_time() - t
        assert not sched.book.live, "every task answered"
        return {k: v / n * 1e6 for k, v in cpu.items()}

    try:
        run(400)
        runs = [run(tasks) for _ in range(repeat)]
        return {
            "submit": min(r["submit"] for r in runs),
            "reply": min(r["reply"] for r in runs),
            "total": min(r["submit"] + r["reply"] for r in runs),
        }
    finally:
        task_module.send_frames = real_send
        sched.close()
        mon.close(linger=0)
        ctx.term()


#: elements per part of an element request in ``scheduler(parts=...)``, and parts per
#: request in the ``scheduler_map`` measure
PART_ELEMENTS = 8
MAP_PARTS = 4


def _part_contents(rng: list[int]) -> list[dict[str, Any]]:
    """An engine's parts answering element request ``rng``, PART_ELEMENTS each."""
    lo, hi = rng
    ok = ApplyReply(ReplyStatus.OK).as_dict()
    cuts = list(range(lo, hi, PART_ELEMENTS)) + [hi]
    return [
        {**ok, ELEMENTS: [a, b], "final": b == hi} for a, b in zip(cuts, cuts[1:], strict=False)
    ]


# -- the hub --------------------------------------------------------------------------------


def hub(tasks: int, repeat: int, per_batch: int = 30, map_of: int = 0) -> dict[str, float]:
    """us per task: the events (unpack, check, records) and the store (flush to SQLite).
    ``map_of``: each task is instead a map of that many elements on 2 engines (W4's), two
    element requests answered in one part each, as the scheduler reports them."""
    ctx = zmq.Context()
    socks: list[zmq.Socket] = []

    def sock(kind: int, address: str) -> zmq.Socket:
        s = ctx.socket(kind)
        s.bind(address)
        socks.append(s)
        return s

    heart = HeartMonitor(
        sock(zmq.PUB, "inproc://sm-ping"),
        sock(zmq.ROUTER, "inproc://sm-pong"),
        period=1.0,
        max_misses=3,
        on_new_heart=lambda u: None,
        on_heart_failure=lambda u, r: None,
    )
    events = sock(zmq.PUSH, "inproc://sm-e")
    drain = ctx.socket(zmq.PULL)
    drain.connect("inproc://sm-e")
    socks.append(drain)
    tmp = tempfile.mkdtemp(prefix="zpar-schedmicro-")
    store = open_store("", os.path.join(tmp, "tasks.db"))
    the_hub = Hub(
        Session(KEY),
        query=sock(zmq.ROUTER, "inproc://sm-q"),
        notification=sock(zmq.XPUB, "inproc://sm-n"),
        monitor=sock(zmq.PULL, "inproc://sm-m"),
        events=events,
        heart=heart,
        addresses=Addresses({}, {}),
        store=store,
    )
    report = HubReport(ctx, "inproc://sm-unused")
    report.close()  # both its sockets: an open one holds ctx.term() below for ever
    packed: list[list[Any]] = []

    class Capture:
        def send_multipart(self, frames: list[Any]) -> None:
            packed.append(frames[1:])

    report.socket = Capture()  # type: ignore[assignment]
    client_s = Session(KEY)
    buffers = pack_apply(len, ((),), {})
    result = [bytes(b) for b in serialize_object(None)]
    client = b"\x00k\x8b\x45\x67"

    def map_events(size: int) -> None:
        half = size // 2
        for lo, hi in ((0, half), (half, size)):
            m = client_s.unpack(
                client_s.serialize(
                    "apply_request", {}, metadata={ELEMENTS: [lo, hi]}, buffers=buffers, dest="task"
                )[1]
            )
            msg_id = m.header["msg_id"]
            report.event(TaskIn(client, m.header, m.metadata))
            report.event(TaskDest(msg_id, ENGINE))
            content = {**ApplyReply(ReplyStatus.OK).as_dict(), ELEMENTS: [lo, hi], "final": True}
            md = _reply_metadata()
            if pack_times is not None:  # per-element dates (the engine's, since issue 24)
                t0 = time.monotonic()
                ends = array("d", (t0 + 3e-6 * (i + 1) for i in range(hi - lo)))
                md[TIMES] = pack_times(time.time() - t0, t0, ends)
            values = [bytes(b) for b in serialize_object(list(range(lo, hi)))]
            report.event(TaskOut(ENGINE, client, msg_id, md, content, values))
        report.flush()

    def batches(n: int) -> list[list[Any]]:
        packed.clear()
        if map_of:
            for _ in range(n):
                map_events(map_of)
            return list(packed)
        for i in range(n):
            m = client_s.unpack(
                client_s.serialize("apply_request", {}, buffers=buffers, dest="task")[1]
            )
            msg_id = m.header["msg_id"]
            report.event(TaskIn(client, m.header, m.metadata))
            report.event(TaskDest(msg_id, ENGINE))
            content = ApplyReply(ReplyStatus.OK).as_dict()
            report.event(TaskOut(ENGINE, client, msg_id, _reply_metadata(), content, result))
            if (i + 1) % per_batch == 0:
                report.flush()
        report.flush()
        return list(packed)

    def run(n: int) -> dict[str, float]:
        cpu = {"events": 0.0, "store": 0.0}
        for frames in batches(n):
            t = time.thread_time()
            the_hub.monitor_reader.task_batch(frames)
            t2 = time.thread_time()
            if the_hub.writer.due:
                the_hub.writer.flush()
            cpu["events"] += t2 - t
            cpu["store"] += time.thread_time() - t2
        t = time.thread_time()
        the_hub.writer.flush(everything=True)
        cpu["store"] += time.thread_time() - t
        return {k: v / n * 1e6 for k, v in cpu.items()}

    try:
        run(400)
        runs = [run(tasks) for _ in range(repeat)]
        return {
            "events": min(r["events"] for r in runs),
            "store": min(r["store"] for r in runs),
            "total": min(r["events"] + r["store"] for r in runs),
        }
    finally:
        store.close()
        for s in socks:
            s.close(linger=0)
        ctx.term()


# -- SQLite ---------------------------------------------------------------------------------


def sqlite_floor(records: int, repeat: int, chunk: int = 500) -> dict[str, float]:
    """us per record: the store's upsert (parameters built beforehand), the three JSON
    columns (SQLiteStore's _params), the result buffer's delete-and-insert."""
    tmp = tempfile.mkdtemp(prefix="zpar-schedmicro-")
    db = sqlite3.connect(os.path.join(tmp, "t.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in DDL:
        db.execute(statement)
    header = {
        "msg_id": "",
        "msg_type": "apply_request",
        "session": str(uuid.uuid4()),
        "username": "user",
        "date": time.time(),
        "version": "2.0",
        "dest": "task",
    }

    def record(i: int) -> dict[str, Any]:
        msg_id = f"{uuid.uuid4().hex}_{i}"
        return {
            "msg_id": msg_id,
            "session": header["session"],
            "client": "006b8b4567",
            "engine_uuid": ENGINE,
            "msg_type": "apply_request",
            "queue": "task",
            "submitted": 1.0,
            "started": 1.0,
            "completed": 2.0,
            "status": "ok",
            "retries": 0,
            "header": {**header, "msg_id": msg_id},
            "metadata": {**_reply_metadata(), "after": [], "follow": []},
            "result_content": {"status": "ok"},
            "stdout": "",
            "stderr": "",
            "result_size": 12,
        }

    def run(step: str) -> float:
        rows = [record(i) for i in range(records)]
        params = [_params(r) for r in rows]
        t = time.thread_time()
        for start in range(0, records, chunk):
            if step == "upsert":
                db.execute("BEGIN")
                db.executemany(_UPSERT, params[start : start + chunk])
                db.execute("COMMIT")
            elif step == "json":
                [_params(r) for r in rows[start : start + chunk]]
            else:
                ids = [p[0] for p in params[start : start + chunk]]
                db.execute("BEGIN")
                db.execute(
                    f"DELETE FROM zpar_result_buffers WHERE msg_id IN ({','.join('?' * len(ids))})",
                    ids,
                )
                db.executemany(_INSERT_BUFFER, [(m, 0, b"\x80\x05N.") for m in ids])
                db.execute("COMMIT")
        return (time.thread_time() - t) / records * 1e6

    try:
        return {step: _best(lambda s=step: run(s), repeat) for step in ("upsert", "json", "buffer")}
    finally:
        db.close()


def measure(tasks: int = 2000, repeat: int = 5) -> dict[str, Any]:
    return {
        "floor_replies_alone": floor(tasks, repeat, replies_batched=False),
        "floor_replies_batched": floor(tasks, repeat, replies_batched=True),
        "scheduler": scheduler(tasks, repeat),
        "scheduler_map": scheduler(tasks, repeat, parts=MAP_PARTS),
        "hub": hub(tasks, repeat),
        "hub_map": hub(max(20, tasks // 20), repeat, map_of=2000),
        "sqlite": sqlite_floor(5 * tasks, repeat),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.add_argument("--tasks", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    res = measure(args.tasks, args.repeat)
    if args.json:
        print(json.dumps(res))
        return
    print(
        f"{res['floor_replies_alone']:8.1f} us/task  floor: a task in a batch of 8, replies alone"
    )
    print(
        f"{res['floor_replies_batched']:8.1f} us/task  floor: a task in a batch of 8, replies in 8s"
    )
    s = res["scheduler"]
    print(
        f"{s['total']:8.1f} us/task  scheduler's Python (submit {s['submit']:.1f}, reply {s['reply']:.1f})"
    )
    s = res["scheduler_map"]
    print(
        f"{s['reply']:8.1f} us/part  scheduler's Python, a map's element request answered in "
        f"{MAP_PARTS} parts (submit {s['submit']:.1f} per part)"
    )
    h = res["hub"]
    print(f"{h['total']:8.1f} us/task  hub (events {h['events']:.1f}, store {h['store']:.1f})")
    h = res["hub_map"]
    print(
        f"{h['total']:8.1f} us/map   hub, a W4 map of 2,000 (events {h['events']:.1f}, "
        f"store {h['store']:.1f})"
    )
    q = res["sqlite"]
    print(
        f"{q['upsert'] + q['json'] + q['buffer']:8.1f} us/record  SQLite floor (upsert "
        f"{q['upsert']:.1f}, JSON columns {q['json']:.1f}, result buffer row {q['buffer']:.1f})"
    )


if __name__ == "__main__":
    main()
