"""The client's floor per task: ``python -m bench.clientfloor [--json]``.

What any client of this architecture pays per no-op load-balanced task in plain Python +
pyzmq + msgpack + hmac, with none of zpar's logic: on the way out the call's pickle (by
reference), an envelope (header, parent, metadata, content, buffer tags), its HMAC-SHA256,
a batch of ``B`` of them packed and sent as one 2-frame multipart; on the way back a batch of
``B`` signed replies received, each reply's signature compared, its replay key looked up and
remembered, its envelope decoded and its header's fields type-checked, its request found by
msg_id and a slotted record resolved, the result unpickled. One thread, real zmq sockets
(ipc), CPU time of this thread (time.thread_time; best of several repeats: the machine is
shared). zpar's client does all of this plus its API (views, AsyncResult, futures that other
threads can wait on, windows): the gap between the two is what zpar's code adds.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
import json
import os
import pickle
import shutil
import tempfile
import time
from typing import Any

import msgpack
import zmq

from .tasks import noop

KEY = b"k" * 32
BATCHES = (1, 8, 64)


class Record:
    """The least a client keeps per task: its id and its outcome."""

    __slots__ = ("msg_id", "done", "value")

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        self.done = False
        self.value: Any = None


def _states() -> tuple[Any, Any]:
    key = KEY.ljust(64, b"\0")
    return (
        hashlib.sha256(bytes(k ^ 0x36 for k in key)),
        hashlib.sha256(bytes(k ^ 0x5C for k in key)),
    )


def _sign(states: tuple[Any, Any], *parts: bytes) -> bytes:
    inner, outer = states
    h = inner.copy()
    for p in parts:
        h.update(p)
    o = outer.copy()
    o.update(h.digest())
    return o.digest()


def run(count: int, b: int, repeat: int) -> dict[str, float]:
    """Best CPU us per task of the send side and of the receive side, batches of ``b``."""
    ctx = zmq.Context()
    where = tempfile.mkdtemp(prefix="zpar-floor-")
    addr = f"ipc://{os.path.join(where, 's')}"
    client = ctx.socket(zmq.DEALER)
    peer = ctx.socket(zmq.ROUTER)
    for sock in (client, peer):  # one thread sends everything before reading: no bound
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    peer.bind(addr)
    client.connect(addr)
    states = _states()
    pack = msgpack.Packer(use_bin_type=True).pack
    session = os.urandom(8).hex()
    counter = itertools.count()
    result = pickle.dumps(None, protocol=5)
    md = {"engine_id": 0, "engine_uuid": "e" * 32, "started": 1.0, "completed": 2.0}
    best_send = best_recv = float("inf")
    try:
        for _ in range(repeat):
            pending: dict[str, Record] = {}
            # -- send side: pickle, envelope, sign, batch, send
            t = time.thread_time()
            batch: list[list[bytes]] = []
            for _ in range(count):
                msg_id = f"{session}_{next(counter)}"
                call = pickle.dumps((noop, (), {}), protocol=5)
                header = {
                    "msg_id": msg_id,
                    "msg_type": "apply_request",
                    "session": session,
                    "date": time.time(),
                    "version": "2.0",
                    "dest": "task",
                }
                envelope = pack([header, {}, {}, {}, [b""]])
                batch.append([_sign(states, envelope, call), envelope, call])
                pending[msg_id] = Record(msg_id)
                if len(batch) == b:
                    client.send_multipart([b"<ZPAR|BATCH>", pack(batch)])
                    batch = []
            if batch:
                client.send_multipart([b"<ZPAR|BATCH>", pack(batch)])
            best_send = min(best_send, (time.thread_time() - t) / count * 1e6)
            # the replies, signed here, untimed (the engine's work)
            replies = []
            ids = list(pending)
            for i in range(0, count, b):
                out = []
                for msg_id in ids[i : i + b]:
                    header = {
                        "msg_id": f"r{msg_id}",
                        "msg_type": "apply_reply",
                        "session": "engine",
                        "date": time.time(),
                        "version": "2.0",
                    }
                    parent = {"msg_id": msg_id, "msg_type": "apply_request"}
                    env = pack([header, parent, md, {"status": "ok"}, [b""]])
                    out.append([_sign(states, env, result), env, result])
                replies.append([b"<ZPAR|BATCH>", pack(out)])
            ident = b""
            for _ in range(-(-count // b)):  # what the client sent, thrown away
                ident = peer.recv_multipart()[0]
            for r in replies:
                peer.send_multipart([ident, *r])
            # -- receive side: recv, verify, replay, decode, check, route, unpickle
            seen: set[int] = set()
            t = time.thread_time()
            for _ in replies:
                frames = client.recv_multipart()
                for sig, env, buf in msgpack.unpackb(frames[1]):
                    if not hmac.compare_digest(sig, _sign(states, env, buf)):
                        raise RuntimeError("bad signature")
                    key = int.from_bytes(sig[:8], "little")
                    if key in seen:
                        raise RuntimeError("replayed")
                    header, parent, _md, content, tags = msgpack.unpackb(env)
                    if not (
                        type(header) is dict
                        and type(header.get("msg_id")) is str
                        and type(header.get("msg_type")) is str
                        and type(parent) is dict
                        and type(content) is dict
                        and type(tags) is list
                    ):
                        raise RuntimeError("malformed")
                    seen.add(key)
                    rec = pending.pop(parent["msg_id"])
                    rec.value = pickle.loads(buf)
                    rec.done = True
            best_recv = min(best_recv, (time.thread_time() - t) / count * 1e6)
    finally:
        client.close(0)
        peer.close(0)
        ctx.term()
        shutil.rmtree(where, ignore_errors=True)
    return {"send": best_send, "receive": best_recv, "total": best_send + best_recv}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    p.add_argument("--count", type=int, default=4000, help="tasks per repeat")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    figures = {f"B={b}": run(args.count, b, args.repeat) for b in BATCHES}
    if args.json:
        print(json.dumps({k: {n: round(v, 2) for n, v in f.items()} for k, f in figures.items()}))
        return
    print("client floor, CPU us per task (best of repeats; noisy machine)")
    for name, f in figures.items():
        print(
            f"{name:6s} send {f['send']:6.2f}  receive {f['receive']:6.2f}  total {f['total']:6.2f}"
        )


if __name__ == "__main__":
    main()
