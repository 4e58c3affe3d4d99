"""zpar.framememory: a process whose glibc was asked to reuse large blocks receives a
second large zmq frame into the memory of the first (no fresh pages), and the switch
that says where reuse is on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from zpar import framememory

# Run in a fresh interpreter: mallopt must come before zmq's I/O thread first allocates,
# and it changes the process for good. Page-fault counts, not times: 25,600 faults are
# 100 MB of fresh 4 KiB pages, and a reused block faults on none of its pages.
RECEIVE_TWICE = textwrap.dedent(
    """
    import os, resource, sys
    from zpar import framememory
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
    print(faults[-1])
    """
)


def _faults_of_a_later_receive(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", RECEIVE_TWICE, mode],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "GLIBC_TUNABLES": ""},
        check=True,
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_large_frame_is_received_into_reused_memory():
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    assert _faults_of_a_later_receive("default") > pages // 2  # fresh pages each time
    assert _faults_of_a_later_receive("reuse") < pages // 20


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
    from zpar import framememory
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
