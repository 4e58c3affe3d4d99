"""zpar.wire.framememory: a process whose glibc was asked to reuse large blocks receives a
second large zmq frame into the memory of the first (no fresh pages), and the switch
that says where reuse is on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
import types

import pytest

from zpar.wire import framememory

# Run in a fresh interpreter: mallopt must come before zmq's I/O thread first allocates,
# and it changes the process for good. Page-fault counts, not times: 25,600 faults are
# 100 MB of fresh 4 KiB pages, and a reused block faults on none of its pages.
RECEIVE_TWICE = textwrap.dedent(
    """
    import os, resource, sys
    from zpar.wire import framememory
    if sys.argv[1] == "reuse":
        assert framememory.reuse_in_this_process()
        assert framememory.reuse_in_this_process()  # once per process, still in effect
    import zmq
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    payload = bytes(64 * 2**20)
    faults = []
    for _ in range(3):
        a.send(payload, copy=False)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        frame = b.recv(copy=False)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        assert len(frame) == len(payload)
        del frame
    print(*faults)
    """
)


def _faults_of_each_receive(mode: str) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", RECEIVE_TWICE, mode],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "GLIBC_TUNABLES": ""},
        check=True,
    )
    return [int(n) for n in out.stdout.split()[-3:]]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
@pytest.mark.cluster
def test_a_large_frame_is_received_into_reused_memory():
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    assert _faults_of_each_receive("default")[-1] > pages // 2  # fresh pages each time
    # a later receive lands in reused memory (the best of the two after the first: a busy
    # machine may compact or reclaim the heap's free block between two of them)
    assert min(_faults_of_each_receive("reuse")[1:]) < pages // 20


def test_the_switch_says_where_reuse_is_on(monkeypatch):
    monkeypatch.delenv(framememory.SWITCH_ENV, raising=False)
    assert framememory.for_engines() and framememory.for_clients()
    monkeypatch.setenv(framememory.SWITCH_ENV, "engines")
    assert framememory.for_engines() and not framememory.for_clients()
    monkeypatch.setenv(framememory.SWITCH_ENV, "0")
    assert not framememory.for_engines() and not framememory.for_clients()
    monkeypatch.setenv(framememory.SWITCH_ENV, "sometimes")
    with pytest.raises(ValueError, match="not 'sometimes'"):
        framememory.for_clients()


# Eleven of twelve 32 MB arrays freed below a live twelfth (352 MB > HOLES_BYTES): holes the heap cannot give back by
# itself. The trimmer gives them back; a block freed at the top (the next frame's) stays.
HOLES = textwrap.dedent(
    """
    import time, numpy as np, psutil
    from zpar.wire import framememory
    assert framememory.reuse_in_this_process()  # its trimmer thread too
    libc = framememory._glibc_heap()
    rss = lambda: psutil.Process().memory_info().rss
    arrays = [np.ones(32 * 2**20 // 8) for _ in range(12)]
    kept = arrays[-1]
    del arrays
    assert framememory.heap_holes(libc) >= 11 * 32 * 2**20
    before = rss()
    deadline = time.monotonic() + 60  # the trimmer looks every TRIM_INTERVAL
    while rss() > before - 10 * 32 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rss() < before - 10 * 32 * 2**20, (before, rss())
    trim = framememory.HoleTrimmer(libc)
    assert trim() and not trim()  # nothing changed since: not due again
    top = np.ones(32 * 2**20 // 8)
    del top  # freed at the top: kept for the next block, not a hole
    assert not trim()
    print("ok", kept[-1])
    """
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
@pytest.mark.cluster
def test_the_trimmer_gives_back_holes_below_a_live_block():
    out = subprocess.run(
        [sys.executable, "-c", HOLES],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "GLIBC_TUNABLES": ""},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split() == ["ok", "1.0"]


class _Heap:
    """mallinfo2 and malloc_trim of a heap the test moves by hand."""

    def __init__(self) -> None:
        self.arena, self.in_use, self.free, self.top = 600 * 2**20, 100 * 2**20, 0, 0
        self.trims: list[int] = []

    def mallinfo2(self):
        return types.SimpleNamespace(
            arena=self.arena, uordblks=self.in_use, fordblks=self.free, keepcost=self.top
        )

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        if pad == 0:  # everything free goes back; the top shrinks the arena
            self.arena -= self.top
            self.free -= self.top
            self.top = 0
        return 1


def test_a_heap_left_idle_gives_back_what_a_burst_kept():
    """A 100 MB frame freed at the top is kept for the next one while transfers go on, and
    given back once, after IDLE_RELEASE seconds without change."""
    heap, now = _Heap(), [0.0]
    trim = framememory.HoleTrimmer(heap, clock=lambda: now[0])
    heap.free = heap.top = 200 * 2**20  # two frames freed at the top: no holes
    for t in range(4):  # a burst: the heap moves every second, nothing trimmed
        now[0] = float(t)
        heap.in_use += 100 * 2**20 if t % 2 else -100 * 2**20
        assert not trim()
    now[0] += framememory.IDLE_RELEASE - 0.1
    assert not trim() and heap.trims == []
    now[0] += 0.2
    assert trim() and heap.trims == [0] and heap.top == 0
    for _ in range(3):  # given back once, not at every look
        now[0] += framememory.IDLE_RELEASE
        assert not trim()
    assert heap.trims == [0]


def test_a_small_idle_heap_is_left_alone():
    heap, now = _Heap(), [0.0]
    trim = framememory.HoleTrimmer(heap, clock=lambda: now[0])
    heap.free = heap.top = framememory.IDLE_FREE_MIN // 2
    assert not trim()
    now[0] += 2 * framememory.IDLE_RELEASE
    assert not trim() and heap.trims == []
