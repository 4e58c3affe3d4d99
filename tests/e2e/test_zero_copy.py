"""A 100 MB array crosses client -> engine -> client without being copied by zpar, through
the sockets (the path between hosts; on one host shared memory carries it instead, pinned
in test_samehost_arrays.py)."""

from __future__ import annotations

import numpy as np
import pytest

import zpar.client.directcall as directcall_mod
import zpar.client.outbox as sending_mod
from zpar.sharedmem import carrier


@pytest.fixture(autouse=True)
def through_sockets(monkeypatch):
    """As between hosts: this client offers no shared memory, so neither side uses it."""
    monkeypatch.setattr(carrier, "_enabled", False)


def _frame_of(arr):
    """Name of what the engine-side array's memory belongs to."""
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    owner = getattr(base, "obj", None)
    return type(owner).__name__, bool(arr.flags.writeable), float(arr[-1])


def test_100mb_array_is_not_copied_on_either_side(rc, monkeypatch):
    arr = np.arange(100 * 2**20 // 8, dtype=np.float64)
    sent = []
    real_send = sending_mod.send_frames

    def spy(sock, frames, *rest):
        sent.extend(
            f
            for f in frames
            if isinstance(f, memoryview)
            and f.nbytes >= arr.nbytes
            and np.shares_memory(np.frombuffer(f, dtype=np.uint8), arr.view(np.uint8))
        )
        return real_send(sock, frames, *rest)

    # a blocking call on one engine is sent by the calling thread (directcall), others by
    # the I/O thread (ioloop): both hand zmq the caller's memory
    monkeypatch.setattr(sending_mod, "send_frames", spy)
    monkeypatch.setattr(directcall_mod, "send_frames", spy)
    owner, writable, last = rc[0].apply_sync(_frame_of, arr)
    assert sent, "the client copied the array before handing it to zmq"
    assert owner == "Frame", "the engine's array is not a view on the received zmq frame"
    assert writable and last == arr[-1]


def test_array_round_trip_returns_equal_view(rc):
    arr = np.random.default_rng(0).random((1000, 1000))
    back = rc[1].apply_sync(lambda a: a, arr)
    np.testing.assert_array_equal(back, arr)
    base = back
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert type(getattr(base, "obj", None)).__name__ == "Frame"
