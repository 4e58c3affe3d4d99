"""Client queries answered from the hub's task store, restarts, and a failing store."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import zpar
from tests.e2e.conftest import wait_until
from zpar.errors import HubRefused

pytestmark = pytest.mark.timeout(180)


def _sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def _hub_knows_done(rc, ar, timeout=10):
    """The hub hears of a reply just after the client: wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if rc.result_status(ar)["completed"] == ar.msg_ids:
                return
        except RuntimeError:  # not even its submission heard of yet
            pass
        assert time.monotonic() < deadline, "the hub never heard of the reply"
        time.sleep(0.02)


def test_result_status_edges(rc):
    assert rc.result_status([]) == {"pending": [], "completed": []}
    with pytest.raises(RuntimeError, match="unknown msg_id.*no-such-id"):
        rc.result_status(["no-such-id"])
    slow = rc.load_balanced_view(targets=[1]).apply_async(_sleep_then, 3, 1)
    fast = rc[0].apply_async(abs, -2)
    fast.get(timeout=10)
    _hub_knows_done(rc, fast)
    st = rc.result_status([slow, fast])
    assert st["pending"] == slow.msg_ids and st["completed"] == fast.msg_ids
    slow.get(timeout=10)
    _hub_knows_done(rc, slow)
    full = rc.result_status(slow, status_only=False)
    rec = full["results"][slow.msg_ids[0]]
    assert rec["status"] == "ok" and rec["result_size"] > 0 and rec["completed"] >= rec["started"]


def test_another_client_gets_10000_results(rc, cluster):
    lv = rc.load_balanced_view()
    ars = [lv.apply_async(abs, -i) for i in range(10_000)]
    rc.wait(ars, timeout=120)
    ids = [a.msg_ids[0] for a in ars]
    with zpar.Client(url_file=cluster.url_file) as other:
        ar = other.get_result(ids)
        assert ar.get(timeout=60) == list(range(10_000))
        assert other.get_result(ids[5]).get(timeout=10) == 5
        assert set(ids) <= set(other.hub_history())


def test_get_result_of_a_pending_task_waits_for_it(rc, cluster):
    task = rc.load_balanced_view().apply_async(_sleep_then, 2, "late")
    # another client's query is eventually consistent: the hub hears of a task from the
    # scheduler's (batched) events, so wait until it has before asking from elsewhere
    wait_until(lambda: _hub_knows(rc, task.msg_ids[0]), "the hub never heard of the task")
    with zpar.Client(url_file=cluster.url_file) as other:
        ar = other.get_result(task.msg_ids[0])
        assert not ar.ready()
        assert ar.get(timeout=10) == "late"
        assert ar.stdout == "" and ar.engine_id in rc.ids


def _hub_knows(rc, msg_id: str) -> bool:
    try:
        rc.result_status([msg_id])
    except HubRefused:
        return False
    return True


def test_remote_errors_and_output_come_back_from_the_store(rc, cluster):
    def noisy():
        print("to stdout")
        raise KeyError("gone")

    ar = rc[1].apply_async(noisy)
    with pytest.raises(zpar.RemoteError):
        ar.get(timeout=10)
    with zpar.Client(url_file=cluster.url_file) as other:
        fetched = other.get_result(ar.msg_ids)
        with pytest.raises(zpar.RemoteError, match="KeyError"):
            fetched.get(timeout=10)
        assert fetched.stdout == ["to stdout\n"]


def test_purge(rc):
    slow = rc.load_balanced_view(targets=[1]).apply_async(_sleep_then, 2, 0)
    done = rc[0].apply_async(abs, -1)
    done.get(timeout=10)
    _hub_knows_done(rc, done)
    with pytest.raises(RuntimeError, match="pending"):
        rc.purge_results(slow)
    with pytest.raises(RuntimeError, match="unknown"):
        rc.purge_results(["no-such-id"])
    with pytest.raises(ValueError, match="needs jobs"):
        rc.purge_results()
    assert rc.purge_results(done) == 1
    with pytest.raises(RuntimeError, match="unknown"):
        rc.result_status(done)
    slow.get(timeout=10)
    _hub_knows_done(rc, slow)
    rc.purge_results("all")
    assert rc.hub_history() == [] or all(
        m in rc.outstanding for m in rc.hub_history()
    )  # only what is still running


def test_db_query(rc):
    t0 = time.time()
    ars = [rc[i % 2].apply_async(abs, -i) for i in range(10)]
    rc.wait(ars)
    query = {"submitted": {"$gte": t0}, "status": "ok"}
    deadline = time.monotonic() + 10  # the hub hears of replies just after the client
    while len(recs := rc.db_query(query, ["engine_uuid", "status"])) < 10:
        assert time.monotonic() < deadline, recs
        time.sleep(0.02)
    assert set(recs[0]) == {"msg_id", "engine_uuid", "status"}
    assert {r["msg_id"] for r in recs} >= {a.msg_ids[0] for a in ars}
    with pytest.raises(RuntimeError, match="unknown record key"):
        rc.db_query({"colour": "red"})
    with pytest.raises(RuntimeError, match="unknown operator"):
        rc.db_query({"status": {"$regex": "o"}})
    assert rc.store_status()["ok"]


def test_restart_on_the_same_sqlite_file_keeps_results(make_cluster, tmp_path):
    db = f"sqlite:///{tmp_path / 'tasks.db'}"
    from tests.e2e.conftest import FAST_HB

    c = make_cluster(2, cluster_id="restart", controller_args=[*FAST_HB, "--db", db])
    rc = c.client
    ars = [rc.load_balanced_view().apply_async(abs, -i) for i in range(50)]
    rc.wait(ars)
    in_flight = rc.load_balanced_view().apply_async(_sleep_then, 60, None)
    deadline = time.monotonic() + 10  # the store must have it before the controller stops
    while True:
        try:
            if rc.result_status(in_flight)["pending"] == in_flight.msg_ids:
                break
        except RuntimeError:  # the hub has not heard of it yet
            pass
        assert time.monotonic() < deadline, "the hub never heard of the running task"
        time.sleep(0.02)
    ids = [a.msg_ids[0] for a in ars]
    # The controller stops with the task in flight, before its engine. c.stop() alone stops
    # the engines first: a hub still up then sees the busy engine stop heartbeating (0.4 s
    # with FAST_HB) before its own SIGTERM, and stores the task as an EngineError, not lost
    ctl = c.launcher.controller
    ctl.terminate()
    ctl.wait(60)
    c.stop()
    c2 = make_cluster(2, cluster_id="restart", controller_args=[*FAST_HB, "--db", db])
    rc2 = c2.client
    assert rc2.get_result(ids).get(timeout=20) == list(range(50))
    lost = rc2.result_status(in_flight, status_only=False)["results"][in_flight.msg_ids[0]]
    assert lost["status"] == "lost"
    with pytest.raises(zpar.RemoteError, match="TaskLost"):
        rc2.get_result(in_flight.msg_ids).get(timeout=10)


def _schedulers(zpar_dir) -> set[int]:
    """Task schedulers started for this ZPAR_DIR (other clusters may run on the machine)."""
    import psutil

    found = set()
    for c in psutil.process_iter(["cmdline"]):
        if "zpar.schedulers" not in " ".join(c.info["cmdline"] or []):
            continue
        try:
            if c.environ().get("ZPAR_DIR") == str(zpar_dir):
                found.add(c.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_corrupt_database_fails_at_start_with_a_clear_error(tmp_path):
    bad = tmp_path / "tasks.db"
    bad.write_bytes(b"not a database at all" * 500)
    env = dict(os.environ, ZPAR_DIR=str(tmp_path))
    p = subprocess.run(
        [sys.executable, "-m", "zpar.hub", "--db", f"sqlite:///{bad}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert p.returncode == 1
    assert "cannot open the task store" in p.stderr and "not a database" in p.stderr
    assert "Traceback" not in p.stderr
    # the task scheduler, started before the store was opened, is stopped with it
    assert not _schedulers(tmp_path)


def test_locked_database_fails_at_start_with_a_clear_error(tmp_path):
    import sqlite3

    from zpar.hub.stores.sql import SQLStore

    db = tmp_path / "tasks.db"
    SQLStore(f"sqlite:///{db}").close()
    holder = sqlite3.connect(db, isolation_level=None)  # another process's lock, in effect
    holder.execute("BEGIN EXCLUSIVE")
    try:
        p = subprocess.run(
            [sys.executable, "-m", "zpar.hub", "--db", f"sqlite:///{db}"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, ZPAR_DIR=str(tmp_path)),
        )
    finally:
        holder.close()
    assert p.returncode == 1
    assert "cannot write to the task store" in p.stderr and "database is locked" in p.stderr
    assert "another controller using this file" in p.stderr
    assert "Traceback" not in p.stderr


def test_the_hub_keeps_going_when_its_database_dies(make_cluster, pg_database):
    url, stop_server = pg_database
    from tests.e2e.conftest import FAST_HB

    c = make_cluster(2, controller_args=[*FAST_HB, "--db", url])
    rc = c.client
    lv = rc.load_balanced_view()
    assert lv.map_sync(abs, range(-10, 0)) == list(range(10, 0, -1))
    stop_server()
    assert lv.map_sync(abs, range(-100, 0), chunksize=1) == list(range(100, 0, -1))
    assert rc[:].apply_sync(abs, -3) == [3, 3]
    deadline = time.monotonic() + 10
    while rc.store_status()["ok"]:
        assert time.monotonic() < deadline, "the store failure was never reported"
        time.sleep(0.1)
    st = rc.store_status()
    assert st["error"] and st["unsaved"] > 0
