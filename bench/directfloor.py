"""The floor under W2: ``python -m bench.directfloor [--count N] [--json]``.

W2 is a blocking call on one engine of this host: the calling thread's DEALER sends to the
engine's ROUTER on an ipc socket and waits for the reply; the engine's main thread polls
its sockets, takes the request, answers. This runs the same topology with nothing but
pyzmq, three ways, so a W2 figure can be read against what zmq alone costs here:

- ``plain``: the echo blocks in recv on its one socket, the caller in recv;
- ``engine-shaped``: the echo polls six sockets as an engine does (control, mux, direct,
  task, heartbeat, signal wake-up) and the caller waits with a receive timeout, as
  client.directcall does;
- ``engine-shaped+hmac``: the same with an HMAC-SHA256 signed and checked on each side
  (what protocol 2 adds at the least, without msgpack or pickle);
- ``shm+eventfd+hmac``: the same signed frames through a shared page instead of the ipc
  socket, each side woken by an eventfd (the echo's in its poll over the six sockets, the
  caller's in a poll with the receive timeout): the floor of a same-host direct channel
  over shared memory, two thread wake-ups a round trip where zmq makes six (its I/O
  threads on both sides, each way).

Per way: median, p99 and min of the round trip, and the CPU per round trip of the caller
and of the echo process (all threads: zmq's I/O thread included). The machine is shared:
compare ways and commits in the same minute, several runs, never one figure.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import mmap
import multiprocessing as mp
import os
import select
import shutil
import statistics
import struct
import tempfile
import time
from typing import Any

import psutil
import zmq

KEY = b"floor-key-0123456789abcdef012345"
#: a no-op apply_request's frames after the identity, at their W2 sizes
FRAMES = [b"<ZPAR|MSG>", b"s" * 32, b"e" * 260, b"p" * 60]
#: sockets an engine's main thread polls besides its direct one
ENGINE_SOCKETS = 5


def _sign(frames: list[bytes]) -> list[bytes]:
    frames[1] = hmac.new(KEY, frames[2] + frames[3], hashlib.sha256).digest()
    return frames


def _check(frames: list[Any]) -> None:
    if not hmac.compare_digest(
        frames[-3], hmac.new(KEY, frames[-2] + frames[-1], hashlib.sha256).digest()
    ):
        raise ValueError("bad signature")


def _echo(addr: str, way: str) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(addr)
    if way == "plain":
        while True:
            sock.send_multipart(sock.recv_multipart())
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    others = [ctx.socket(zmq.DEALER) for _ in range(ENGINE_SOCKETS)]
    for s in others:
        poller.register(s, zmq.POLLIN)
    signed = way.endswith("hmac")
    while True:
        poller.poll(1000)
        frames = sock.recv_multipart()
        if signed:
            _check(frames)
            frames = [frames[0], *_sign(frames[1:])]
        sock.send_multipart(frames)


#: the shared page of the shm way: a request at 0, a reply at HALF; each [u32 length, body]
HALF = 32768


def _pack(frames: list[bytes]) -> bytes:
    return struct.pack(f"<{len(frames) + 1}I", len(frames), *map(len, frames)) + b"".join(frames)


def _unpack(buf: Any, at: int) -> list[bytes]:
    (n,) = struct.unpack_from("<I", buf, at + 4)
    lens = struct.unpack_from(f"<{n}I", buf, at + 8)
    out, pos = [], at + 8 + 4 * n
    for ln in lens:
        out.append(bytes(buf[pos : pos + ln]))
        pos += ln
    return out


def _put(buf: Any, at: int, frames: list[bytes]) -> None:
    body = _pack(frames)
    buf[at + 4 : at + 4 + len(body)] = body
    struct.pack_into("<I", buf, at, len(body))


def _echo_shm(page: mmap.mmap, ring: int, answer: int) -> None:
    ctx = zmq.Context()
    poller = zmq.Poller()
    poller.register(ring, zmq.POLLIN)
    others = [ctx.socket(zmq.DEALER) for _ in range(ENGINE_SOCKETS + 1)]
    for s in others:
        poller.register(s, zmq.POLLIN)
    while True:
        poller.poll(1000)
        try:
            os.eventfd_read(ring)
        except BlockingIOError:
            continue
        frames = _unpack(page, 0)
        _check(frames)
        _put(page, HALF, _sign(frames))
        os.eventfd_write(answer, 1)


def _run_shm(count: int) -> dict[str, Any]:
    page = mmap.mmap(-1, 2 * HALF)
    ring = os.eventfd(0, os.EFD_NONBLOCK)
    answer = os.eventfd(0, os.EFD_NONBLOCK)
    echo = mp.get_context("fork").Process(target=_echo_shm, args=(page, ring, answer))
    echo.daemon = True
    echo.start()
    waiter = select.poll()
    waiter.register(answer, select.POLLIN)

    def call() -> list[bytes]:
        _put(page, 0, _sign(list(FRAMES)))
        os.eventfd_write(ring, 1)
        while not waiter.poll(100):  # the receive timeout: a direct call checks its future
            pass
        os.eventfd_read(answer)
        reply = _unpack(page, HALF)
        _check(reply)
        return reply

    try:
        for _ in range(300):
            call()
        me, peer = psutil.Process(), psutil.Process(echo.pid)
        cpu0, peer0 = _cpu(me), _cpu(peer)
        times = []
        for _ in range(count):
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        return {
            "times": times,
            "caller": (_cpu(me) - cpu0) / count,
            "echo": (_cpu(peer) - peer0) / count,
        }
    finally:
        echo.kill()
        echo.join()
        os.close(ring)
        os.close(answer)
        page.close()


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def run_way(way: str, count: int) -> dict[str, Any]:
    if way == "shm+eventfd+hmac":
        r = _run_shm(count)
        return _figures(way, r["times"], count, r["caller"], r["echo"])
    rundir = tempfile.mkdtemp(prefix="zpar-floor-")
    addr = f"ipc://{rundir}/echo"
    echo = mp.get_context("spawn").Process(target=_echo, args=(addr, way), daemon=True)
    echo.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(addr)
    signed = way.endswith("hmac")
    try:
        sock.rcvtimeo = 30_000  # the echo's interpreter starts
        for _ in range(300):
            sock.send_multipart(_sign(list(FRAMES)) if signed else FRAMES)
            sock.recv_multipart()
        if way != "plain":
            sock.rcvtimeo = 100
        me, peer = psutil.Process(), psutil.Process(echo.pid)
        cpu0, peer0 = _cpu(me), _cpu(peer)
        times = []
        for _ in range(count):
            t = time.perf_counter()
            frames = _sign(list(FRAMES)) if signed else FRAMES
            sock.send_multipart(frames)
            while True:
                try:
                    reply = sock.recv_multipart()
                    break
                except zmq.Again:  # the receive timeout: a direct call checks its future
                    continue
            if signed:
                _check(reply)
            times.append(time.perf_counter() - t)
        caller, echo_cpu = (_cpu(me) - cpu0) / count, (_cpu(peer) - peer0) / count
    finally:
        sock.close()
        ctx.term()
        echo.kill()
        echo.join()
        shutil.rmtree(rundir, ignore_errors=True)
    return _figures(way, times, count, caller, echo_cpu)


def _figures(
    way: str, times: list[float], count: int, caller: float, echo_cpu: float
) -> dict[str, Any]:
    times.sort()
    return {
        "way": way,
        "median_us": statistics.median(times) * 1e6,
        "p99_us": times[int(0.99 * (count - 1))] * 1e6,
        "min_us": times[0] * 1e6,
        "caller_cpu_us": caller * 1e6,
        "echo_cpu_us": echo_cpu * 1e6,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=5000, help="round trips per way")
    p.add_argument("--json", action="store_true", help="one JSON line per way")
    args = p.parse_args()
    for way in ("plain", "engine-shaped", "engine-shaped+hmac", "shm+eventfd+hmac"):
        r = run_way(way, args.count)
        if args.json:
            print(json.dumps(r))
        else:
            print(
                f"{way:20s} median {r['median_us']:6.0f} us  p99 {r['p99_us']:6.0f}  "
                f"min {r['min_us']:4.0f}  CPU per round trip: caller {r['caller_cpu_us']:4.0f}"
                f" us, echo {r['echo_cpu_us']:4.0f} us  (load {r['load']:.1f})"
            )


if __name__ == "__main__":
    main()
