"""Blocking calls on one engine, sent and awaited by the calling thread (client.directcall)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import zpar
from tests.e2e.conftest import wait_for_files, wait_until
from zpar.serialize import pack_apply
from zpar.wire import send_frames


def _sleep_then(t, value):
    import time

    time.sleep(t)
    return value


def test_blocking_call_on_one_engine_skips_the_io_thread(rc, monkeypatch):
    handed = []
    real_submit = rc._io.submit
    monkeypatch.setattr(rc._io, "submit", lambda r: handed.append(r.channel) or real_submit(r))
    assert rc[1].apply_sync(lambda x: x + 1, 41) == 42
    assert handed == []  # never handed to the I/O thread
    msg_id = rc.history[-1]
    assert rc._direct_caller._by_thread[threading.current_thread()]  # its socket to engine 1
    assert rc[1].apply_async(lambda: 0).get(timeout=10) == 0 and handed == ["mux"]
    # the hub recorded both; the second a moment ago (its copies come in batches): this
    # client's own just-sent task is waited for, not refused as unknown
    assert rc.get_result(msg_id).get(timeout=10) == 42
    assert rc.get_result(rc.history[-1]).get(timeout=10) == 0
    with pytest.raises(RuntimeError, match="unknown msg_id"):  # not ours: refused at once
        rc.get_result("not-a-task").get(timeout=1)
    with pytest.raises(zpar.RemoteError, match="ZeroDivisionError"):
        rc[0].apply_sync(lambda: 1 / 0)


def test_a_blocking_call_leaves_no_cyclic_garbage(rc):
    """Freed by reference counts alone: the client's gc has nothing to collect for it (a
    collection every ~60 calls was ~300 us added to one call in 60; docs/decisions.md)."""
    import gc

    from zpar.client.futures import ReplyFuture
    from zpar.client.request import PendingRequest

    assert rc[0].apply_sync(os.getpid) > 0  # the socket made, warm
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for i in range(50):
            assert rc[0].apply_sync(lambda x: x, i) == i
        gc.collect()
        requests = [o for o in gc.garbage if isinstance(o, PendingRequest)]
        requests += [o.request for o in gc.garbage if isinstance(o, ReplyFuture)]
        left = [r for r in requests if r is not None and r.channel == "direct"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_the_hub_records_every_blocking_call_once_from_the_batched_copies(rc):
    """The engine's copies of a burst of direct calls reach the hub packed in batches
    (engine.monitorcopies): each call is still recorded, once, with its engine and result."""
    t0 = time.time()
    for i in range(300):
        assert rc[i % 2].apply_sync(abs, -i) == i
    ids = rc.history[-300:]
    query = {"submitted": {"$gte": t0}, "status": "ok"}
    deadline = time.monotonic() + 60  # the copies come at most every 10 ms
    while len(recs := rc.db_query(query, ["engine_uuid", "queue"])) < 300:
        assert time.monotonic() < deadline, f"{len(recs)} of 300 recorded"
        time.sleep(0.05)
    assert sorted(r["msg_id"] for r in recs) == sorted(ids)  # each once, nothing else
    uuids = {r["engine_uuid"] for r in recs}
    assert len(uuids) == 2 and {r["queue"] for r in recs} == {"mux"}
    assert rc.get_result(ids[-1]).get(timeout=10) == 299


def test_threads_each_wait_for_their_own_reply(rc):
    got, errors = {}, []

    def work(i):
        try:
            got[i] = rc[i % 2].apply_sync(_sleep_then, 0.01 * (i % 3), i)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and got == {i: i for i in range(8)}


def test_ended_threads_sockets_are_closed_and_their_number_is_bounded(rc, monkeypatch):
    import zpar.client.directcall as directcall

    caller = rc._direct_caller
    t = threading.Thread(target=lambda: rc[0].apply_sync(os.getpid))
    t.start()
    t.join(30)
    assert t in caller._by_thread  # kept until a socket is made again
    later = threading.Thread(target=lambda: rc[1].apply_sync(os.getpid))
    later.start()  # its new socket: ended threads' ones are closed first
    later.join(30)
    assert t not in caller._by_thread
    monkeypatch.setattr(directcall, "MAX_SOCKETS", 0)  # no room: through the I/O thread
    other = threading.Thread(target=lambda: rc[0].apply_sync(os.getpid))
    other.start()
    other.join(30)
    assert other not in caller._by_thread


def test_a_reply_to_an_abandoned_call_is_dropped_as_stale(rc):
    """A call interrupted (Ctrl-C) leaves its reply to come later on the thread's socket:
    the next call must get its own answer, not that one."""
    rc[0].apply_sync(os.getpid)  # this thread's socket exists
    uuid = rc.sender.engine_uuid(0)
    sock = rc._direct_caller._socket(uuid, rc._io.private_address(uuid))
    _, frames = rc.session.serialize("apply_request", {})
    send_frames(sock, [*frames, *pack_apply(_sleep_then, (0.2, "abandoned"), {})])
    assert rc[0].apply_sync(_sleep_then, 0, "mine") == "mine"


def _mark_then_sleep(path, t):
    import pathlib
    import time

    pathlib.Path(path).write_text("started")
    time.sleep(t)


def test_engine_death_fails_the_waiting_call(make_cluster, tmp_path):
    c = make_cluster(n=1)
    rc = c.client
    pid = rc[0].apply_sync(os.getpid)
    marker = tmp_path / "started"

    def kill_once_running():
        wait_for_files(marker)
        os.kill(pid, 9)

    killer = threading.Thread(target=kill_once_running)
    killer.start()
    t = time.monotonic()
    with pytest.raises(zpar.EngineError, match="died"):
        rc[0].apply_sync(_mark_then_sleep, str(marker), 30)
    assert time.monotonic() - t < 15
    killer.join(30)


def test_closing_the_client_fails_a_call_waiting_in_another_thread(make_cluster):
    c = make_cluster(n=1)
    other = c.connect_client()
    other.wait_for_engines(1, timeout=30)
    outcome = []

    def wait():
        try:
            other[0].apply_sync(_sleep_then, 30, None)
        except Exception as e:
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: other._io.table._watched, "the call waiting for its reply")
    other.close()
    t.join(10)
    assert not t.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], zpar.EngineError)
    assert "closed" in str(outcome[0])
