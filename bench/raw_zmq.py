"""W8: what pyzmq itself does on this machine, the floor the other rows are compared with.

A DEALER talks to a Python echo process through a C ROUTER-ROUTER relay in a third
process (the shape of a direct call), plus the small-message rate of that path and the
bandwidth of one 100 MB frame each way over tcp and ipc.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import zmq


def _relay(front: str, back: str) -> None:
    from zmq.devices import monitored_queue

    ctx = zmq.Context()
    a, b, m = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)
    a.bind(front)
    b.bind(back)
    m.bind("inproc://monitor")
    monitored_queue(a, b, m, b"in", b"out")


def _echo(addr: str, identity: bytes | None) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    if identity:
        s.setsockopt(zmq.IDENTITY, identity)
    s.connect(addr)
    while True:
        s.send_multipart(s.recv_multipart(copy=False), copy=False)


def _port(ctx: zmq.Context) -> str:
    s = ctx.socket(zmq.ROUTER)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    s.close()
    return f"tcp://127.0.0.1:{port}"


def run(count: int) -> dict[str, Any]:
    ctx = zmq.Context()
    front, back = _port(ctx), _port(ctx)
    mpctx = mp.get_context("spawn")
    procs = [
        mpctx.Process(target=_relay, args=(front, back), daemon=True),
        mpctx.Process(target=_echo, args=(back, b"echo"), daemon=True),
    ]
    out: dict[str, Any] = {}
    try:
        for p in procs:
            p.start()
        c = ctx.socket(zmq.DEALER)
        c.setsockopt(zmq.LINGER, 0)
        c.connect(front)
        frames = [b"echo", b"<ZPAR|MSG>", b"s" * 64, b"h" * 120, b"{}", b"{}", b"{}", b"x" * 200]
        deadline = time.monotonic() + 20
        while True:  # the relay drops messages for the echo until it has connected
            c.send_multipart(frames)
            if c.poll(100):
                c.recv_multipart()
                break
            if time.monotonic() > deadline:
                raise RuntimeError("raw relay did not answer within 20 s")
        while c.poll(200):  # late echoes of the retries
            c.recv_multipart()
        for _ in range(200):  # warm up
            c.send_multipart(frames)
            c.recv_multipart()
        ts = []
        for _ in range(count):
            t = time.perf_counter()
            c.send_multipart(frames)
            c.recv_multipart()
            ts.append(time.perf_counter() - t)
        out["relay_rtt_us"] = statistics.median(ts) * 1e6
        n = max(count * 5, 2000)
        window = 100
        t = time.perf_counter()
        inflight = 0
        sent = 0
        while sent < n or inflight:
            while sent < n and inflight < window:
                c.send_multipart(frames)
                sent += 1
                inflight += 1
            c.recv_multipart()
            inflight -= 1
        out["relay_msgs_per_s"] = n / (time.perf_counter() - t)
        c.close()
    finally:
        for p in procs:
            p.kill()
            p.join()
    out["bw_tcp_gbs"] = _bandwidth(ctx, "tcp://127.0.0.1:*")
    with tempfile.TemporaryDirectory() as d:
        out["bw_ipc_gbs"] = _bandwidth(ctx, f"ipc://{d}/bw")
    ctx.term()
    return out


def _bandwidth(ctx: zmq.Context, addr: str) -> float:
    """GB/s for 100 MB sent to an echo thread and back (counting both ways)."""
    import threading

    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(addr)
    b.connect(a.getsockopt_string(zmq.LAST_ENDPOINT))
    arr = np.random.default_rng(0).random(100 * 2**20 // 8)
    reps = 4

    def echo() -> None:
        for _ in range(reps):
            b.send(b.recv(copy=False), copy=False)

    t = threading.Thread(target=echo)
    t.start()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a.send(arr, copy=False)
        a.recv(copy=False)
        best = min(best, time.perf_counter() - t0)
    t.join()
    a.close(linger=0)
    b.close(linger=0)
    return 2 * arr.nbytes / best / 1e9


if __name__ == "__main__":
    print(run(int(os.environ.get("COUNT", "1000"))))
