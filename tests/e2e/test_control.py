"""Control messages overtake queued work; engine death is noticed and reported."""

from __future__ import annotations

import os
import signal
import time

import pytest

import zpar
from zpar.wire import Session
from zpar.wire.messages import MsgType


def _spin(seconds):
    import time

    end = time.time() + seconds
    while time.time() < end:  # pure Python, holds the GIL
        pass
    return seconds


def test_abort_overtakes_a_long_task(rc):
    e0 = rc[0]
    long = e0.apply_async(_spin, 1.5)
    queued = e0.apply_async(lambda: "ran")
    rc.abort(queued, targets=[0], block=True)
    assert long.get(timeout=20) == 1.5
    with pytest.raises(zpar.TaskAborted):
        queued.get(timeout=20)


def test_clear_overtakes_a_long_task(rc):
    e0 = rc[0]
    e0.push({"keep": 1}, block=True)
    long = e0.apply_async(_spin, 1.0)
    after = e0.apply_async(lambda: "keep" in globals())
    rc.clear(targets=[0], block=True)  # handled before `after`, though sent later
    assert long.get(timeout=20) == 1.0
    assert after.get(timeout=20) is False


def test_heartbeat_survives_a_long_pure_python_task(rc):
    # 0.1 s heartbeats, 4 misses: a 2 s GIL-holding task would kill an engine whose heart
    # needed the GIL.
    assert rc[1].apply_sync(_spin, 2.0) == 2.0
    assert rc.ids == [0, 1]


def _mark_and_spin(path, seconds):
    open(path, "w").close()
    return _spin(seconds)


def test_sigkilled_engine_is_unregistered_and_its_work_fails(make_cluster, tmp_path):
    c = make_cluster(2)
    rc = c.client
    pids = rc[:].apply_sync(os.getpid)
    lv = rc.load_balanced_view(targets=[1])
    lb_task = lv.apply_async(_mark_and_spin, str(tmp_path / "lb"), 30)
    direct_task = rc[1].apply_async(_mark_and_spin, str(tmp_path / "direct"), 30)
    deadline = time.monotonic() + 10  # death mid-task, not a queueing race: wait for a start
    while not any((tmp_path / m).exists() for m in ("lb", "direct")):
        assert time.monotonic() < deadline, "no task started on engine 1"
        time.sleep(0.01)
    t0 = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(zpar.EngineError):
        direct_task.get(timeout=10)
    with pytest.raises(zpar.EngineError):
        lb_task.get(timeout=10)
    assert time.monotonic() - t0 < 5
    rc.wait_for_engines(1)
    assert rc.ids == [0]
    assert rc[0].apply_sync(lambda: 1) == 1


def test_registration_with_identity_in_use_is_refused(rc, cluster):
    import zmq

    from zpar.cluster.connection import read_connection_file

    info = read_connection_file(cluster.launcher.engine_file)
    session = Session(info.key)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(info.registration)
        in_use = rc._io.engines[0]
        session.send(
            sock, MsgType.REGISTRATION_REQUEST, {"uuid": in_use, "hostname": "x", "pid": 1}
        )
        assert sock.poll(10_000), "hub did not answer"
        reply = session.feed(sock.recv_multipart(copy=False))
        assert reply is not None and reply.content["status"] == "error"
        assert in_use in reply.content.get("evalue", "")
    finally:
        sock.close()


def test_shutdown_hub_stops_everything(make_cluster):
    import psutil

    c = make_cluster(2)
    rc = c.client
    procs = [psutil.Process(p.pid) for p in [c.launcher.controller, *c.launcher.engines]]
    rc.shutdown(hub=True)
    _, alive = psutil.wait_procs(procs, timeout=15)
    assert not alive


def test_killed_engine_is_noticed_by_its_closed_connection(make_cluster, tmp_path):
    """With slow heartbeats (2 s x 4), death is noticed from the closed heartbeat
    connection, not from missed beats: the error says which."""
    c = make_cluster(2, controller_args=["--hb-period", "2", "--hb-misses", "4"])
    rc = c.client
    pid = rc[1].apply_sync(os.getpid)
    task = rc[1].apply_async(_mark_and_spin, str(tmp_path / "m"), 30)
    while not (tmp_path / "m").exists():
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    # the launcher waiting on the engine process may tell the hub first (issue 18)
    with pytest.raises(zpar.EngineError, match="connection closed|launcher saw the process exit"):
        task.get(timeout=30)
    assert rc.ids == [0]
