"""Large buffers between the client and engines of this host go through shared memory, both
ways, look to users as frames did, and nothing is left when either side is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import zpar
from tests.e2e.conftest import wait_until
from zpar import sharedmem
from zpar.sharedmem import carrier

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not sharedmem.enabled(), reason="needs Linux memfd and /proc"),
]

BIG = 4 * 2**20  # bytes: above SHM_MIN_BYTES


def _holder(a):
    """The type name of what the memory under array ``a`` belongs to."""
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return type(getattr(base, "obj", base)).__name__


def _seen_on_engine(a):
    return _holder(a), bool(a.flags.writeable), str(a.dtype), a.shape, float(a.flat[-1])


def _engine_stats():
    from zpar import sharedmem

    return sharedmem.stats()


def _memfd_maps(pid):
    """Mappings of zpar segments in process ``pid``."""
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if "memfd:zpar-shm" in line]


def _zpar_files_in_dev_shm():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("zpar"))


def _holds_for(pid):
    """Holds this process's segments have for process ``pid`` (slot -> pid, start)."""
    return [
        slot
        for seg in list(carrier._pool.segments.values())
        for slot, (p, _) in list(seg.dest.items())
        if p == pid and seg.ctl[8 + slot]
    ]


def _learn(rc, eid=0):
    """A small call first: the engine's answer tells the client it is on this host."""
    rc[eid].apply_sync(len, [1])
    assert sharedmem.peer_pid(rc.session.session, rc._io.engines[eid]) is not None


def test_arguments_and_results_cross_through_segments(rc):
    _learn(rc)
    a = np.arange(BIG // 8, dtype=np.float64).reshape(256, -1)
    seen = rc[0].apply_sync(_seen_on_engine, a)
    assert seen == ("SegmentBuffer", True, "float64", a.shape, float(a.flat[-1]))
    back = rc[0].apply_sync(lambda x: x * 2, a)
    assert _holder(back) == "SegmentBuffer" and back.flags.writeable
    np.testing.assert_array_equal(back, a * 2)


def test_a_first_large_call_answers_through_a_segment_and_teaches_the_client(rc):
    carrier.forget_peer(rc.session.session, rc._io.engines[1])
    a = np.ones(BIG // 4, dtype=np.float32)
    back = rc[1].apply_sync(lambda x: x, a)  # sent as frames (not known yet), answered in shm
    assert _holder(back) == "SegmentBuffer"
    assert sharedmem.peer_pid(rc.session.session, rc._io.engines[1]) is not None


def test_push_pull_scatter_gather(rc):
    _learn(rc, 0)
    _learn(rc, 1)
    dv = rc[:]
    a = np.random.default_rng(1).random(BIG // 8)
    dv.push({"a": a}, block=True)
    assert dv.apply_sync(lambda: _seen_on_engine(a))[0][0] == "SegmentBuffer"
    pulled = rc[0].pull("a", block=True)
    assert _holder(pulled) == "SegmentBuffer" and pulled.flags.writeable
    np.testing.assert_array_equal(pulled, a)
    pulled[:] = 0  # the client's copy: the engine's value stays
    assert rc[0].apply_sync(lambda: float(a[-1])) == a[-1]
    big = np.arange(4 * BIG // 8, dtype=np.int64)
    dv.scatter("part", big, block=True)
    assert dv.apply_sync(lambda: _holder(part)) == ["SegmentBuffer"] * 2  # noqa: F821
    np.testing.assert_array_equal(dv.gather("part", block=True), big)


def test_an_unwritten_argument_comes_back_without_a_copy(rc):
    _learn(rc)
    a = np.arange(BIG // 8, dtype=np.float64)
    rc[0].apply_sync(lambda x: x, a)  # warm: the segments exist
    before = rc[0].apply_sync(_engine_stats)["segments"]
    back = rc[0].apply_sync(lambda x: x, a)
    np.testing.assert_array_equal(back, a)
    assert rc[0].apply_sync(_engine_stats)["segments"] == before  # named back, not copied
    changed = rc[0].apply_sync(lambda x: (x.__setitem__(0, -1.0), x)[1], a)
    assert changed[0] == -1.0 and changed[1] == 1.0 and a[0] == 0.0


def test_shared_array_crosses_without_a_copy(rc):
    _learn(rc)
    s = zpar.shared_array((BIG // 8,), np.float64)
    s[:] = 2.0
    segments = carrier.stats()["segments"]
    rc[0].push({"s": s}, block=True)
    assert carrier.stats()["segments"] == segments  # its own segment, no other made
    assert rc[0].apply_sync(lambda: _seen_on_engine(s))[:2] == ("SegmentBuffer", True)  # noqa: F821
    s[1] = 5.0  # the engine reads the shared pages as they are now
    assert rc[0].apply_sync(lambda: float(s[1])) == 5.0  # noqa: F821


def test_shm_off_sends_frames(cluster, monkeypatch):
    monkeypatch.setattr(carrier, "_enabled", False)  # as ZPAR_SHM=0 in this client
    rc = cluster.connect_client_sync()  # a new client: it offers nothing
    try:
        a = np.arange(BIG // 8, dtype=np.float64)
        assert rc[0].apply_sync(_seen_on_engine, a)[0] == "Frame"
        assert _holder(rc[0].apply_sync(lambda x: x, a)) == "Frame"
    finally:
        rc.close()


def test_a_client_of_another_host_gets_frames(cluster, monkeypatch):
    """The engine decides from the offer's host key: a client whose key is not its own
    (another boot, pid or mount namespace: another host) is answered with frames, as
    before shared memory, and sends frames."""
    key, pid, start = carrier.offer()
    monkeypatch.setattr(carrier, "_offer", ["0" * len(key), pid, start])
    rc = cluster.connect_client_sync()
    try:
        a = np.arange(BIG // 8, dtype=np.float64)
        segments = carrier.stats()["segments"]
        assert rc[0].apply_sync(_seen_on_engine, a)[0] == "Frame"
        back = rc[0].apply_sync(lambda x: x, a)
        assert _holder(back) == "Frame" and back.flags.writeable
        np.testing.assert_array_equal(back, a)
        assert sharedmem.peer_pid(rc.session.session, rc._io.engines[0]) is None
        assert carrier.stats()["segments"] == segments
    finally:
        rc.close()


def test_a_killed_engine_leaves_no_segment(make_cluster):
    before = _zpar_files_in_dev_shm()
    c = make_cluster(n=1)
    rc = c.connect_client_sync()
    try:
        _learn(rc)
        pid = rc[0].apply_sync(os.getpid)
        busy = rc[0].apply_async(time.sleep, 30)
        pending = rc[0].apply_async(len, np.ones(BIG // 8))  # waits behind the sleep
        wait_until(lambda: _holds_for(pid), "a hold for the engine")
        mine = [  # the segments sent to it (others may be held by other tests' engines)
            seg
            for seg in list(carrier._pool.segments.values())
            if any(p == pid for p, _ in list(seg.dest.values()))
        ]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _holds_for(pid), "the dead engine's hold freed")
        wait_until(
            lambda: not any(seg.token in carrier._pool.segments for seg in mine),
            "its segment closed once idle",
            30,
        )
        for ar in (busy, pending):
            with pytest.raises(Exception):  # noqa: B017 (the engine died: EngineError or remote)
                ar.get(timeout=30)
    finally:
        rc.close()
    assert _zpar_files_in_dev_shm() == before


_CLIENT = textwrap.dedent(
    """
    import sys, time, numpy as np, zpar
    rc = zpar.Client(url_file=sys.argv[1])
    rc[0].apply_sync(len, [1])
    mode = sys.argv[2]
    if mode == "send":  # a push queued behind a sleep: taken by the engine after our death
        rc[0].apply_async(time.sleep, 2)
        rc[0].push({"x": np.ones(BIG // 8)}, block=False)
    else:  # a result the engine makes for us after our death
        rc[0].apply_async(lambda: (time.sleep(2), np.ones(BIG // 8))[1])
    time.sleep(0.5)
    print("sent", flush=True)
    time.sleep(60)
    """
).replace("BIG", str(BIG))


@pytest.mark.parametrize("mode", ["send", "reply"])
def test_a_killed_client_leaves_no_segment(make_cluster, mode):
    before = _zpar_files_in_dev_shm()
    c = make_cluster(n=1)
    rc = c.connect_client_sync()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, str(c.url_file), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        if line != "sent":
            proc.wait(30)
            pytest.fail(f"the client script failed: {proc.stderr.read()[-2000:]}")
        proc.kill()
        proc.wait(10)
        engine_pid = rc[0].apply_sync(os.getpid)  # after the engine's sleep
        rc[0].clear(block=True)
        wait_until(
            lambda: (
                not _memfd_maps(engine_pid) and rc[0].apply_sync(_engine_stats)["segments"] == 0
            ),
            "the engine holding no segment",
            30,
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
        rc.close()
    assert _zpar_files_in_dev_shm() == before
