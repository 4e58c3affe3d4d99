"""Signed frames for the wire's tests (tests/core/test_session.py, test_signing.py,
test_envelope.py, test_batching.py, test_multipart.py, …): one key, a message, an envelope
signed as given, batches of messages, two connected inproc sockets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import zmq

import zpar.wire as wire
from zpar.constants import BATCH_DELIM, DELIM, PROTOCOL_VERSION
from zpar.wire import Session

KEY = b"secret-key"

#: a header field given this value is left out of envelope_header()'s header
DROP = object()


def frames_of(session: Session | None = None, **kw: Any) -> list[Any]:
    """The frames of a signed apply_request {"x": 1} (``kw``: serialize's, buffers…)."""
    session = session or Session(KEY)
    _, frames = session.serialize("apply_request", {"x": 1}, **kw)
    return frames


def signed_frames(envelope: bytes, session: Session | None = None, buffers=()) -> list[Any]:
    """A message whose envelope is the given raw bytes, correctly signed."""
    session = session or Session(KEY)
    return [DELIM, session.sign([envelope]), envelope, *buffers]


def envelope_header(**kw: Any) -> dict[str, Any]:
    """A sound apply_request header, with ``kw`` changed (DROP: left out)."""
    h = {"msg_id": "m1", "msg_type": "apply_request", "session": "s", "date": 1.0}
    h["version"] = PROTOCOL_VERSION
    h.update(kw)
    return {k: v for k, v in h.items() if v is not DROP}


def batch_of(n, session=None, buffers=lambda i: [f"b{i}".encode()] * (i % 3)) -> list[list]:
    """``n`` signed messages of one session, message i with ``buffers(i)``."""
    session = session or Session(KEY)
    return [frames_of(session, buffers=buffers(i)) for i in range(n)]


def framed_batch(messages: list[list[Any]]) -> list[Any]:
    """A batch in the framed layout whatever its buffers' size (batch() packs small ones)."""
    counts = [len(m) - wire.HEAD_FRAMES for m in messages]
    return [BATCH_DELIM, msgpack.packb(counts), *[f for m in messages for f in m[1:]]]


@contextmanager
def inproc_pair() -> Iterator[tuple[zmq.Socket, zmq.Socket]]:
    """Two connected inproc PAIR sockets (inproc + copy=False: the receiver's frame is the
    sender's memory, so zero-copy is observable)."""
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    name = f"inproc://wire-test-{id(a):x}"
    a.bind(name)
    b.connect(name)
    try:
        yield a, b
    finally:
        a.close(linger=0)
        b.close(linger=0)
