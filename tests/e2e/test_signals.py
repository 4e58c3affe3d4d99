"""rc.send_signal reaches engines while they run a task; rc.shutdown(restart=True)."""

from __future__ import annotations

import os
import signal

import pytest

import zpar
from tests.e2e.conftest import wait_for_files, wait_until


def _wait_for_marker_then_spin(path, seconds):
    import pathlib
    import time

    pathlib.Path(path).write_text("started")
    end = time.time() + seconds
    while time.time() < end:  # pure Python: holds the GIL except at switch points
        pass
    return "finished"


def test_sigint_interrupts_a_running_task_and_the_engine_lives_on(rc, tmp_path):
    marker = str(tmp_path / "started")
    ar = rc[0].apply_async(_wait_for_marker_then_spin, marker, 60)
    wait_for_files(marker)
    assert rc.send_signal("SIGINT", targets=[0]) == [0]
    with pytest.raises(zpar.RemoteError) as info:
        ar.get(timeout=20)
    assert info.value.ename == "KeyboardInterrupt"
    assert info.value.engine_id == 0
    assert rc[0].apply_sync(lambda: 6 * 7) == 42  # still serving


def test_sigint_while_idle_is_ignored(rc, cluster):
    pid = rc[1].apply_sync(os.getpid)
    log = cluster.launcher._logs[pid]
    ignored = "engine 1: SIGINT while idle: ignored"
    before = log.read_text().count(ignored)
    assert rc.send_signal(signal.SIGINT, targets=1) == [1]
    # delivered, and the engine said so
    wait_until(lambda: log.read_text().count(ignored) > before, "engine 1 reporting the SIGINT")
    assert rc[1].apply_sync(os.getpid) == pid  # still the same engine, serving


def test_send_signal_to_all_by_short_name(rc, tmp_path):
    markers = [str(tmp_path / f"m{i}") for i in rc.ids]
    ars = [
        rc[i].apply_async(_wait_for_marker_then_spin, m, 60)
        for i, m in zip(rc.ids, markers, strict=True)
    ]
    wait_for_files(*markers)
    assert rc.send_signal("int") == sorted(rc.ids)
    for ar in ars:
        with pytest.raises(zpar.RemoteError, match="KeyboardInterrupt"):
            ar.get(timeout=20)


def test_send_signal_bad_arguments_fail_before_sending(rc):
    with pytest.raises(ValueError, match="unknown signal name 'SIGNOPE'"):
        rc.send_signal("SIGNOPE")
    with pytest.raises(ValueError, match="not a valid signal number"):
        rc.send_signal(100000)
    with pytest.raises(TypeError, match="a signal is a number or a name"):
        rc.send_signal(1.5)
    with pytest.raises(zpar.EngineError, match="engine 99 is not registered"):
        rc.send_signal("SIGINT", targets=[99])


def test_hub_refuses_a_bad_signal_request(rc):
    from zpar.wire.messages import MsgType

    with pytest.raises(RuntimeError, match="no such engines: \\[99\\]"):
        rc.sender.query(MsgType.SIGNAL_REQUEST, {"signum": 2, "targets": [99]})
    with pytest.raises(RuntimeError, match="'x' is not a signal number"):
        rc.sender.query(MsgType.SIGNAL_REQUEST, {"signum": "x", "targets": None})


def test_sigterm_through_send_signal_stops_the_engine(make_cluster, tmp_path):
    c = make_cluster(n=2)
    rc = c.client
    rc.wait_for_engines(2, timeout=30)
    marker = str(tmp_path / "started")
    ar = rc[1].apply_async(_wait_for_marker_then_spin, marker, 60)
    wait_for_files(marker)
    rc.send_signal("SIGTERM", targets=[1])
    with pytest.raises(zpar.EngineError):
        ar.get(timeout=30)
    assert rc[0].apply_sync(lambda: "alive") == "alive"


def test_shutdown_restart_gives_a_fresh_engine_with_the_same_id_and_pid(make_cluster):
    c = make_cluster(n=2)
    rc = c.client
    rc.wait_for_engines(2, timeout=30)
    dv = rc[:]
    dv.push({"state": "old"}, block=True)
    pids = dv.apply_sync(os.getpid)
    uuids = dict(rc._io.engines)
    rc.shutdown(targets=[0], restart=True, timeout=30)
    assert sorted(rc.ids) == [0, 1]
    assert rc._io.engines[0] != uuids[0]  # a new registration
    assert rc._io.engines[1] == uuids[1]
    assert dv.apply_sync(os.getpid) == pids  # the launcher's process, exec'd in place
    assert rc[0].apply_sync(lambda: "state" in globals()) is False
    assert rc[1].apply_sync(lambda: "state" in globals()) is True
    # the task scheduler knows the restarted engine under its old id
    assert rc.load_balanced_view(targets=[0]).apply_sync(os.getpid) == pids[0]


def test_shutdown_restart_of_the_controller_is_refused(rc):
    with pytest.raises(ValueError, match="a controller cannot restart itself"):
        rc.shutdown(restart=True, hub=True)
