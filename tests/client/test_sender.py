"""client.sender: the route of a request is decided once, before it is signed.

A direct request to an engine on this host goes to the engine's own ipc socket, signed
``private``: its buffers over STORE_RESULT_LIMIT carry no BLAKE3 tag (the socket is in the
controller's 0700 run directory, see wire.Session.serialize), whether it is one
``apply_sync`` sent by the calling thread or a ``scatter`` part sent by the I/O thread. A
load-balanced request (through the task scheduler) is tagged. Served by zpar.testing's
in-process cluster, whose engines are on this host."""

from __future__ import annotations

import numpy as np
import pytest

from zpar.constants import STORE_RESULT_LIMIT
from zpar.sharedmem import carrier
from zpar.testing import inprocess_cluster  # noqa: F401 - a fixture
from zpar.wire.frames import nbytes

#: more than STORE_RESULT_LIMIT per engine once scattered over 2
BIG = 4 * STORE_RESULT_LIMIT // 8


@pytest.fixture
def lrc(inprocess_cluster, monkeypatch):  # noqa: F811 - the fixture above
    lrc = inprocess_cluster.client
    # large buffers through the sockets, not shared-memory segments (whose descriptors
    # are signed in the envelope and never hashed either way)
    monkeypatch.setattr(carrier, "_enabled", False)
    lrc.clear(block=True)
    return lrc


@pytest.fixture
def hashed(lrc, monkeypatch):
    """The sizes of the buffers the client's session tags with BLAKE3."""
    sizes: list[int] = []
    real = lrc.session.tag

    def tag(buffer):
        sizes.append(nbytes(buffer))
        return real(buffer)

    monkeypatch.setattr(lrc.session, "tag", tag)
    return sizes


def _large(sizes: list[int]) -> list[int]:
    return [n for n in sizes if n > STORE_RESULT_LIMIT]


def test_engines_of_the_in_process_cluster_have_a_private_route(lrc):
    for uuid in lrc._io.engines.values():
        assert lrc._io.private_address(uuid) is not None


def test_scatter_to_engines_on_this_host_hashes_no_large_buffer(lrc, hashed):
    data = np.arange(BIG, dtype=np.float64)
    lrc[:].scatter("x", data, block=True)
    assert _large(hashed) == []
    sums = lrc[:].apply_sync(lambda: float(x.sum()))  # noqa: F821 - x lives on the engines
    assert sum(sums) == float(data.sum())
    assert _large(hashed) == []


def test_a_blocking_call_and_an_async_one_take_the_same_route(lrc, hashed):
    data = np.ones(BIG, dtype=np.float64)
    assert lrc[0].apply_sync(np.sum, data) == BIG  # sent and awaited by this thread
    assert lrc[0].apply_async(np.sum, data).get(timeout=30) == BIG  # by the I/O thread
    assert _large(hashed) == []


def test_a_load_balanced_request_is_tagged(lrc, hashed):
    data = np.ones(BIG, dtype=np.float64)
    assert lrc.load_balanced_view().apply_sync(np.sum, data) == BIG
    assert _large(hashed) == [data.nbytes]
