"""The floor of W3's architecture in Python: ``python -m bench.floor [--tasks N] [--runs R]``.

The same processes and sockets as zpar's load-balanced path, with none of zpar's logic::

    client DEALER ──► ROUTER scheduler ROUTER ◄── DEALER engine (x2)
           ◄── replies ──┘        │ PUB (a copy of every request and reply)
                                  └──► SUB hub

Each message is what zpar sends for a no-op task: a msgpack envelope ``[header, parent,
metadata, content, tags]`` with zpar's header fields, and the pickled call (the engine
unpickles and runs it, and pickles the result). Per hop a receiver decodes the envelope,
checks it is a 5-array, and (with HMAC) verifies an HMAC-SHA256 over envelope + buffer and
refuses a replayed signature (a set of the last 65,536); the scheduler re-signs each
request with the engine as ``dest``, as zpar's does, and copies every request and reply to
the hub, which checks each copy. Layouts:

- ``frames``: each message as zpar's lone message, ``[DELIM, signature, envelope, buffer]``;
- ``packed``: each message as one frame, msgpack ``[signature, envelope, buffer]``;
- batches of B messages as one frame, msgpack ``[[signature, envelope, buffer], ...]``, the
  scheduler placing up to B on an engine at once and forwarding replies B at a time.

Prints tasks/s and CPU per task (user + system, all threads, by psutil) of each process,
min-max over the runs. A floor: what any design with these hops pays in CPython with pyzmq
and msgpack, for comparing with zpar's "W3 CPU per task, by process" (bench), not a test.
The machine is shared: rates are noisy, CPU per task less so.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import multiprocessing as mp
import pickle
import time
import timeit
from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack
import psutil
import zmq

KEY = b"floor-benchmark-key-0123456789ab"
DELIM = b"<ZPAR|MSG>"
#: client's unanswered tasks at most (zpar's WINDOW_REQUESTS)
WINDOW = 256
#: tasks an engine holds at most (zpar's TASK_HWM_LOADED)
DEPTH = 8
REPLAY = 65536
ENGINE_IDS = [b"engine-0", b"engine-1"]

packb = msgpack.Packer(use_bin_type=True).pack


def unpackb(b: Any) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


def noop() -> None:
    return None


class Wire:
    """Sign, verify, refuse replays: plain hmac + a bounded set, no zpar code."""

    def __init__(self, signed: bool, session: str) -> None:
        self.key = KEY if signed else b""
        # HMAC-SHA256 as its two keyed SHA-256 states, copied per message (RFC 2104): the
        # cheapest HMAC in CPython, ~1.2 us against ~3.5 for hmac.digest of envelope + buffer
        key = KEY.ljust(64, b"\0")
        self.inner = hashlib.sha256(bytes(k ^ 0x36 for k in key))
        self.outer = hashlib.sha256(bytes(k ^ 0x5C for k in key))
        self.session = session
        self.count = 0
        self.seen: set[bytes] = set()
        self.order: deque[bytes] = deque()

    def make(
        self,
        msg_type: str,
        buf: bytes,
        *,
        parent: dict | None = None,
        metadata: dict | None = None,
        dest: str | None = None,
    ) -> list[bytes]:
        self.count += 1
        header = {
            "msg_id": f"{self.session}_{self.count}",
            "msg_type": msg_type,
            "session": self.session,
            "username": "floor",
            "date": time.time(),
            "version": "2.0",
        }
        if dest is not None:
            header["dest"] = dest
        return self.sign_env([header, parent or {}, metadata or {}, {}, [b""]], buf)

    def sign(self, envelope: bytes, buf: bytes) -> bytes:
        h = self.inner.copy()
        h.update(envelope)
        h.update(buf)
        o = self.outer.copy()
        o.update(h.digest())
        return o.digest()

    def sign_env(self, env: list, buf: bytes) -> list[bytes]:
        envelope = packb(env)
        return [self.sign(envelope, buf) if self.key else b"", envelope, buf]

    def check(self, sig: bytes, envelope: bytes, buf: bytes) -> list:
        if self.key:
            if not hmac.compare_digest(sig, self.sign(envelope, buf)):
                raise ValueError("bad signature")
            if sig in self.seen:
                raise ValueError("replayed")
            self.seen.add(sig)
            self.order.append(sig)
            if len(self.order) > REPLAY:
                self.seen.discard(self.order.popleft())
        env = unpackb(envelope)
        if type(env) is not list or len(env) != 5 or type(env[0]) is not dict:
            raise ValueError("malformed")
        return env


def _messages(frames: list[Any]) -> tuple[bytes, list[list[bytes]]]:
    """(identity, [[sig, envelope, buf], ...]) of a multipart in any of the layouts."""
    if len(frames) == 2:  # [ident, packed]
        body = unpackb(frames[1])
        return frames[0], body if type(body[0]) is list else [body]
    return frames[0], [frames[2:5]]  # [ident, DELIM, sig, envelope, buf]


def _out(msgs: list[list[bytes]], layout: str) -> list[bytes]:
    """The frames (identity excluded) carrying ``msgs`` in ``layout``."""
    if len(msgs) > 1:
        return [packb(msgs)]
    if layout == "packed":
        return [packb(msgs[0])]
    return [DELIM, *msgs[0]]


def _sock(ctx: zmq.Context, kind: int, identity: bytes | None = None) -> zmq.Socket:
    s = ctx.socket(kind)
    s.setsockopt(zmq.LINGER, 0)
    if identity:
        s.setsockopt(zmq.IDENTITY, identity)
    return s


def hub(addr: str, signed: bool) -> None:
    ctx = zmq.Context()
    sub = _sock(ctx, zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(addr)
    wire = Wire(signed, "hub")
    records: dict[str, str] = {}
    while True:
        frames = sub.recv_multipart()
        _, msgs = _messages([b"", *frames])
        for sig, envelope, buf in msgs:
            env = wire.check(sig, envelope, buf)
            header = env[0]
            records[env[1].get("msg_id") or header["msg_id"]] = header["msg_type"]
            if len(records) > REPLAY:
                records.clear()


def scheduler(front: str, back: str, pub_addr: str, signed: bool, layout: str, bsize: int) -> None:
    ctx = zmq.Context()
    fsock, bsock, pub = _sock(ctx, zmq.ROUTER), _sock(ctx, zmq.ROUTER), _sock(ctx, zmq.PUB)
    fsock.bind(front)
    bsock.bind(back)
    pub.bind(pub_addr)
    wire = Wire(signed, "sched")
    credits: dict[bytes, int] = {}
    waiting: deque[list] = deque()  # checked requests with no engine free
    owner: dict[str, bytes] = {}  # msg_id -> client identity
    poller = zmq.Poller()
    poller.register(fsock, zmq.POLLIN)
    poller.register(bsock, zmq.POLLIN)

    def place() -> None:
        while waiting and credits:
            eng = max(credits, key=credits.__getitem__)
            n = min(credits[eng], bsize, len(waiting))
            if n == 0:
                return
            out = []
            for _ in range(n):
                env, buf = waiting.popleft()
                header = dict(env[0], dest=eng.decode())
                out.append(wire.sign_env([header, *env[1:]], buf))
            credits[eng] -= n
            bsock.send_multipart([eng, *_out(out, layout)])

    while True:
        for sock, _ in poller.poll():
            frames = sock.recv_multipart()
            if sock is bsock:
                if frames[1] == b"ready":
                    credits[frames[0]] = DEPTH
                    place()
                    continue
                eng, msgs = _messages(frames)
                clients: dict[bytes, list] = {}
                for m in msgs:
                    env = wire.check(*m)
                    clients.setdefault(owner.pop(env[1]["msg_id"]), []).append(m)
                credits[eng] += len(msgs)
                for cid, out in clients.items():
                    fsock.send_multipart([cid, *_out(out, layout)])
                pub.send_multipart(_out(msgs, layout))
            else:
                cid, msgs = _messages(frames)
                for m in msgs:
                    env = wire.check(*m)
                    owner[env[0]["msg_id"]] = cid
                    waiting.append((env, m[2]))
                pub.send_multipart(_out(msgs, layout))
            place()


def engine(back: str, identity: bytes, signed: bool, layout: str) -> None:
    ctx = zmq.Context()
    s = _sock(ctx, zmq.DEALER, identity)
    s.connect(back)
    s.send(b"ready")
    wire = Wire(signed, identity.decode())
    result = {"engine_id": 0, "engine_uuid": identity.decode(), "status": "ok"}
    while True:
        _, msgs = _messages([b"", *s.recv_multipart()])
        out = []
        for m in msgs:
            env = wire.check(*m)
            f, args, kwargs = pickle.loads(m[2])
            started = time.time()
            r = f(*args, **kwargs)
            buf = pickle.dumps(r, 5)
            meta = dict(result, started=started, completed=time.time(), stdout="", stderr="")
            out.append(wire.make("apply_reply", buf, parent=env[0], metadata=meta))
        s.send_multipart(_out(out, layout))


def client(front: str, signed: bool, layout: str, bsize: int, conn: Any) -> None:
    ctx = zmq.Context()
    s = _sock(ctx, zmq.DEALER)
    s.connect(front)
    wire = Wire(signed, "client")
    call = pickle.dumps((noop, (), {}), 5)
    pending: dict[str, int] = {}

    def run(n: int) -> float:
        t0 = time.perf_counter()
        sent = done = 0
        while done < n:
            while sent < n and sent - done < WINDOW:
                k = min(bsize, n - sent, WINDOW - (sent - done))
                out = []
                for _ in range(k):
                    m = wire.make("apply_request", call, dest="task")
                    pending[f"client_{wire.count}"] = sent
                    out.append(m)
                    sent += 1
                s.send_multipart(_out(out, layout))
            _, msgs = _messages([b"", *s.recv_multipart()])
            for m in msgs:
                env = wire.check(*m)
                pending.pop(env[1]["msg_id"])
                done += 1
        return time.perf_counter() - t0

    run(200)  # every process up and connected
    conn.send("ready")
    n = conn.recv()
    conn.send(run(n))


def one_run(n: int, signed: bool, layout: str, bsize: int) -> dict[str, Any]:
    ctx = zmq.Context()
    addrs = []
    for _ in range(3):
        probe = ctx.socket(zmq.ROUTER)
        port = probe.bind_to_random_port("tcp://127.0.0.1")
        probe.close()
        addrs.append(f"tcp://127.0.0.1:{port}")
    ctx.term()
    front, back, pub = addrs
    spawn = mp.get_context("spawn")
    parent, child = spawn.Pipe()
    roles: list[tuple[str, Callable, tuple]] = [
        ("scheduler", scheduler, (front, back, pub, signed, layout, bsize)),
        ("hub", hub, (pub, signed)),
        *[(f"engine{i}", engine, (back, e, signed, layout)) for i, e in enumerate(ENGINE_IDS)],
        ("client", client, (front, signed, layout, bsize, child)),
    ]
    procs = {name: spawn.Process(target=fn, args=args, daemon=True) for name, fn, args in roles}
    try:
        for p in procs.values():
            p.start()
        if not parent.poll(60):
            raise RuntimeError("floor: the client did not warm up within 60 s")
        parent.recv()
        ps = {name: psutil.Process(p.pid) for name, p in procs.items()}
        before = {name: sum(p.cpu_times()[:2]) for name, p in ps.items()}
        parent.send(n)
        if not parent.poll(600):
            raise RuntimeError("floor: the run did not finish within 600 s")
        elapsed = parent.recv()
        after = {name: sum(p.cpu_times()[:2]) for name, p in ps.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.join()
    cpu = {name: (after[name] - before[name]) / n * 1e6 for name in procs}
    cpu["engines"] = sum(v for k, v in cpu.items() if k.startswith("engine"))
    for k in [k for k in cpu if k.startswith("engine") and k != "engines"]:
        del cpu[k]
    cpu["total"] = cpu["client"] + cpu["scheduler"] + cpu["hub"] + cpu["engines"]
    return {"tasks_per_s": n / elapsed, "cpu_us": cpu}


CONFIGS = [
    ("frames", 1, False),
    ("frames", 1, True),
    ("packed", 1, False),
    ("packed", 1, True),
    ("packed", 8, False),
    ("packed", 8, True),
    ("packed", 32, True),
]


def micro(number: int = 20000) -> dict[str, float]:
    """CPU per call of each plain step a message takes (best of 5, us): what any Python
    design pays per message, whatever its logic."""
    wire, rx = Wire(True, "micro"), Wire(True, "rx")
    for i in range(REPLAY):  # the replay set full, as in a process that has run a while
        rx.seen.add(i.to_bytes(32, "little"))
        rx.order.append(i.to_bytes(32, "little"))
    call = pickle.dumps((noop, (), {}), 5)
    sig, envelope, _ = wire.make("apply_request", call, dest="task")
    env = unpackb(envelope)
    made = iter([wire.make("apply_request", call, dest="task") for _ in range(6 * number)])
    steps: dict[str, Callable[[], Any]] = {
        "make: header dict, msgpack pack, HMAC": lambda: wire.make("x", b"", dest="t"),
        "msgpack pack of the envelope": lambda: packb(env),
        "msgpack unpack of the envelope": lambda: unpackb(envelope),
        "HMAC-SHA256 of envelope + call (state copies)": lambda: wire.sign(envelope, call),
        "hmac.digest of envelope + call (one call)": lambda: hmac.digest(
            KEY, envelope + call, "sha256"
        ),
        "check: HMAC + replay set + unpack + 5-array": lambda: rx.check(*next(made)),
        "pickle.loads of the call": lambda: pickle.loads(call),
        "pickle.dumps of None": lambda: pickle.dumps(None, 5),
    }
    out = {
        name: min(timeit.repeat(fn, number=number, repeat=5, timer=time.process_time))
        / number
        * 1e6
        for name, fn in steps.items()
    }
    out.update(_socket_hop(number // 4, [DELIM, sig, envelope, call], "4 frames (zpar lone)"))
    out.update(_socket_hop(number // 4, [packb([sig, envelope, call])], "1 frame (packed)"))
    return out


def _socket_hop(n: int, frames: list[bytes], label: str) -> dict[str, float]:
    """CPU (this process and its zmq I/O threads) per message sent DEALER -> ROUTER over
    tcp on 127.0.0.1 and received, 100 in flight, best of 3."""
    ctx = zmq.Context()
    tx, rx = _sock(ctx, zmq.DEALER), _sock(ctx, zmq.ROUTER)
    port = rx.bind_to_random_port("tcp://127.0.0.1")
    tx.connect(f"tcp://127.0.0.1:{port}")
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        sent = got = 0
        while got < n:
            while sent < n and sent - got < 100:
                tx.send_multipart(frames)
                sent += 1
            rx.recv_multipart()
            got += 1
        best = min(best, (time.process_time() - t0) / n * 1e6)
    tx.close()
    rx.close()
    ctx.term()
    return {f"socket hop, send + recv, {label}": best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20000, help="tasks per run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", action="store_true", help="one JSON line per configuration")
    p.add_argument("--micro", action="store_true", help="only the per-message steps, in-process")
    args = p.parse_args()
    if args.micro:
        for name, us in micro().items():
            print(f"{us:8.2f} us  {name}")
        return
    order = ["client", "scheduler", "hub", "engines", "total"]
    if not args.json:
        print(f"{args.tasks} no-op tasks, 2 engines, {args.runs} runs: min-max (noisy machine)")
        cols = " ".join(f"{k:>11}" for k in order)
        print(f"{'layout':8} {'batch':>5} {'hmac':>4} {'tasks/s':>15}   CPU us/task: {cols}")
    for layout, bsize, signed in CONFIGS:
        runs = [one_run(args.tasks, signed, layout, bsize) for _ in range(args.runs)]
        rates = [r["tasks_per_s"] for r in runs]
        cpus = {k: [r["cpu_us"][k] for r in runs] for k in order}
        if args.json:
            print(json.dumps({"layout": layout, "batch": bsize, "hmac": signed, "runs": runs}))
            continue
        cells = " ".join(f"{min(v):5.0f}-{max(v):<5.0f}" for v in cpus.values())
        print(
            f"{layout:8} {bsize:>5} {'on' if signed else 'off':>4} "
            f"{min(rates):7.0f}-{max(rates):<7.0f} {'':13} {cells}"
        )


if __name__ == "__main__":
    main()
