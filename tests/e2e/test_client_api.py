"""The ipyparallel-style client surface: flags, imap, waiting, weak result caches."""

from __future__ import annotations

import functools
import gc
import os
import time
import weakref

import numpy as np
import pytest

import zpar.serialize


def _slow_square(x):
    import time

    time.sleep(0.01)
    return x * x


def test_set_flags_and_temp_flags(rc):
    lv = rc.load_balanced_view()
    with pytest.raises(KeyError, match="no flag 'blok'"):
        lv.set_flags(blok=True)
    assert lv.block is False
    with lv.temp_flags(block=True, targets=[1]):
        assert lv.apply(os.getpid) == rc[1].apply_sync(os.getpid)
    assert lv.block is False and lv.targets is None


def test_label_travels_in_the_request_metadata(rc, monkeypatch):
    seen = []
    real = rc.session.serialize

    def spy(msg_type, content=None, **kw):
        seen.append(kw.get("metadata"))
        return real(msg_type, content, **kw)

    monkeypatch.setattr(rc.session, "serialize", spy)
    lv = rc.load_balanced_view()
    lv.label = "stage-1"
    lv.apply_sync(lambda: 1)
    assert seen[-1] == {"label": "stage-1"}


def _gated_square(x, gate):
    """x * x; every x but 0 first waits for the file ``gate`` (30 s at most)."""
    import os
    import time

    deadline = time.monotonic() + 30
    while x and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.005)
    return x * x


def test_imap_is_lazy_and_bounded(rc, tmp_path):
    """While its calls are held on the engines, imap has read no more inputs than
    max_outstanding + 1; it reads on as results return (ipyparallel's imap), so the calls
    are gated: a loaded host's late check saw results, and reads, arrive in between."""
    lv = rc.load_balanced_view()
    consumed = []
    gate = tmp_path / "gate"

    def numbers():
        for i in range(40):
            consumed.append(i)
            yield i

    it = lv.imap(functools.partial(_gated_square, gate=str(gate)), numbers(), max_outstanding=4)
    try:
        assert next(it) == 0
        assert len(consumed) <= 5  # no more than max_outstanding + 1 read ahead
    finally:
        gate.touch()  # the rest runs, and is read to the end: no imap left feeding the cluster
        rest = list(it)
    assert rest == [i * i for i in range(1, 40)]


def test_wait_for_jobs_and_everything(rc):
    ars = [rc.load_balanced_view().apply_async(_slow_square, i) for i in range(10)]
    assert rc.wait(ars[:3], timeout=20)
    assert rc.wait(timeout=20) and not rc.outstanding
    assert rc.wait([ars[0].msg_ids[0]], timeout=1)
    with pytest.raises(KeyError, match="no job"):
        rc.wait(["not-a-msg-id"])
    with pytest.raises(TypeError):
        rc.wait([3.5])


def test_results_are_kept_by_their_asyncresult_not_the_client(rc):
    ar = rc[0].apply_async(lambda: "kept")
    ar.get(timeout=10)
    msg_id = ar.msg_ids[0]
    assert msg_id not in rc.results  # owned by ar (ipyparallel pops it too)
    assert msg_id in rc.history
    ref = weakref.ref(ar._futures[0])
    del ar
    gc.collect()
    assert ref() is None  # nothing in the client holds the result


def test_client_executor(rc):
    with rc.executor() as ex:
        assert list(ex.map(_slow_square, range(6))) == [0, 1, 4, 9, 16, 25]


def test_track_waits_until_zmq_released_the_array(rc):
    dv = rc[0]
    dv.track = True
    a = np.ones(2**20)
    ar = dv.apply_async(np.sum, a)
    assert ar.wait_for_send(timeout=10)
    a[:] = 0  # safe now: zmq is done with the memory
    assert ar.get(timeout=10) == 2**20


def test_view_wait_abort_and_queue_status(rc):
    lv = rc.load_balanced_view()
    ars = [lv.apply_async(_slow_square, i) for i in range(4)]
    assert lv.wait(ars, timeout=20)
    status = lv.queue_status()
    assert set(status) >= {0, 1, "unassigned"}
    long = rc[0].apply_async(time.sleep, 1)
    queued = rc[0].apply_async(lambda: "ran")
    rc[0].abort(queued, block=True)
    long.get(timeout=10)
    with pytest.raises(Exception, match="abort"):
        queued.get(timeout=10)


def test_remote_and_parallel_decorators(rc):
    dv = rc[:]

    @dv.remote(block=True)
    def where():
        import os

        return os.getpid()

    assert sorted(where()) == sorted(dv.apply_sync(os.getpid))

    @dv.parallel(block=True)
    def double(block):
        return [2 * x for x in block]

    assert double(list(range(7))) == [2 * x for x in range(7)]

    @dv.parallel(block=True)
    def inc(x):
        return x + 1

    assert inc.map(range(3)) == [1, 2, 3]

    lv = rc.load_balanced_view()

    @lv.parallel(block=True, chunksize=3)
    def total(block):
        return [sum(block)]

    # ipyparallel cuts 10 items into ceil(10 / 3) = 4 balanced blocks: 3, 3, 2, 2
    assert total(list(range(10))) == [3, 12, 13, 17]
    arr = dv.parallel(lambda b: b * 2, block=True)(np.arange(10.0))
    np.testing.assert_array_equal(arr, np.arange(10.0) * 2)


def test_run_file_and_sync_imports(rc, tmp_path):
    script = tmp_path / "setup_engine.py"
    script.write_text("import math\nfrom_file = math.sqrt(16)\n")
    dv = rc[:]
    dv.run(str(script), block=True)
    assert dv["from_file"] == [4.0, 4.0]
    with dv.sync_imports(quiet=True):
        import json  # noqa: F401
    assert dv.apply_sync(lambda: "json" in globals()) == [True, True]


def test_use_pickle_still_sends_local_functions_by_value(rc):
    dv = rc[:]
    try:
        dv.use_pickle()
        assert dv.apply_sync(os.getpid) == rc[:].apply_sync(os.getpid)
        k = 3
        assert dv.apply_sync(lambda: k) == [3, 3]  # a closure: by value, as ipyparallel
    finally:
        zpar.serialize.use_default()
        dv.apply_sync(zpar.serialize.use_default)
    assert dv.apply_sync(lambda: 1) == [1, 1]


def test_broadcast_view_sends_the_payload_once(rc, monkeypatch):
    import zpar.client.outbox as sending_mod

    bv = rc.broadcast_view()
    big = np.arange(2**18, dtype=np.float64)  # 2 MB
    sent = []
    real = sending_mod.send_frames

    def spy(sock, frames, *rest):
        sent.append(sum(len(memoryview(f).cast("B")) for f in frames if not isinstance(f, str)))
        return real(sock, frames, *rest)

    monkeypatch.setattr(sending_mod, "send_frames", spy)
    sums = bv.apply_sync(np.sum, big)
    assert sums == [big.sum(), big.sum()]
    assert len(sent) == 1 and sent[0] >= big.nbytes  # one message, not one per engine
    monkeypatch.undo()
    bv.push({"shared": 7}, block=True)
    assert bv.pull("shared", block=True) == [7, 7]
    assert bv.execute("y = shared * 2", block=True) is not None
    assert rc[:].pull("y", block=True) == [14, 14]
    ar = bv.apply_async(os.getpid)
    assert ar.get(timeout=10) == rc[:].apply_sync(os.getpid)
    assert ar.engine_id == [0, 1]


def test_history_holds_work_not_queries_or_control(rc):
    ar = rc[0].apply_async(lambda: "last work")
    ar.get(timeout=10)
    rc.queue_status()
    rc.clear(targets=[1], block=True)
    assert rc.history[-1] == ar.msg_ids[0]
    assert rc.get_result(-1).get(timeout=10) == "last work"
