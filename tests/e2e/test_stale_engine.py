"""An engine the hub declared dead while it lived on (issue 13 item 1): SIGSTOPped past the
heartbeat's limit, then SIGCONTed. The hub tells its heart it is no longer registered
(hub/staleheart.py); the engine drops what it had (its late replies are refused by the
scheduler, the hub's record and the client as well), re-executes itself and registers
again under its old id. Every task is answered once, and stored once."""

from __future__ import annotations

import os
import signal

import pytest

import zpar
from tests.e2e.conftest import wait_until
from zpar.wire.messages import MsgType


def _first_run_waits(log_path, go_path):
    """Append this engine's pid to ``log_path``; the first run waits for ``go_path``."""
    import os
    import time

    pid = os.getpid()
    with open(log_path, "a") as f:
        f.write(f"{pid}\n")
    with open(log_path) as f:
        first = int(f.readline())
    while first == pid and not os.path.exists(go_path):
        time.sleep(0.001)
    return pid


def _engine_info(rc):
    engines = rc.sender.query(MsgType.ENGINE_INFO_REQUEST, {}).content["engines"]
    return {int(eid): e["pid"] for eid, e in engines.items()}


def _pid():
    import os

    return os.getpid()


def test_an_engine_stopped_past_its_heartbeat_registers_again_and_nothing_is_answered_twice(
    make_cluster, tmp_path
):
    c = make_cluster(n=2)
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    log_path, go_path = tmp_path / "runs", tmp_path / "go"
    lb = rc.load_balanced_view(retries=1).apply_async(_first_run_waits, str(log_path), str(go_path))
    wait_until(lambda: log_path.exists() and log_path.read_text(), "the task started", 30)
    victim_pid = int(log_path.read_text().split()[0])
    victim = next(eid for eid, pid in _engine_info(rc).items() if pid == victim_pid)
    old_uuid = rc.sender.engine_uuid(victim)
    # queued behind the load-balanced task on the victim: failed when it is declared dead,
    # and never run there (the engine checks its registration after a SIGCONT)
    direct = rc[victim].apply_async(_first_run_waits, str(tmp_path / "direct"), str(go_path))

    os.kill(victim_pid, signal.SIGSTOP)
    try:
        wait_until(direct.ready, "the stopped engine's direct task failed", 30)
        assert victim not in rc.ids
        # the load-balanced task went to the other engine, which does not wait
        other_pid = lb.get(timeout=30)
        assert other_pid != victim_pid
        go_path.touch()
    finally:
        os.kill(victim_pid, signal.SIGCONT)

    # told by the hub, it registers again: the same process and id, a new identity
    wait_until(
        lambda: victim in rc.ids and rc.sender.engine_uuid(victim) != old_uuid,
        f"engine {victim} registered again",
        60,
    )
    assert _engine_info(rc)[victim] == victim_pid
    assert rc[victim].apply_sync(_pid) == victim_pid
    logs = "".join(
        p.read_text() for p in c.launcher.log_dir.glob(f"{c.launcher.cluster_id}-engine-*")
    )
    assert "the hub unregistered this engine" in logs
    assert "still beats after it was unregistered" in "".join(
        p.read_text() for p in c.launcher.log_dir.glob(f"{c.launcher.cluster_id}-controller*")
    )

    # one answer each: the late copies changed nothing the client holds
    assert lb.get(timeout=5) == other_pid
    with pytest.raises(zpar.EngineError):
        direct.get(timeout=5)
    # the stopped engine's run of the load-balanced task wrote its pid: it ran twice, and
    # only the resubmitted copy's answer counts
    runs = [int(x) for x in log_path.read_text().split()]
    assert runs[0] == victim_pid and other_pid in runs
    # what was queued on it when it stopped never ran there: after SIGCONT it asked the hub
    # before taking its next request, and was told it no longer counts
    assert not (tmp_path / "direct").exists()
    # the store: the load-balanced task finished once, on the other engine; the direct one
    # is the dead engine's loss, whatever its late reply said. (A direct request still
    # queued in the engine's direct ipc socket reaches the hub only when the engine takes
    # it: absent if the engine heard it was unregistered first.)
    lb_id, direct_id = lb.msg_ids[0], direct.msg_ids[0]

    def stored():
        keys = ["msg_id", "status", "engine_uuid", "completed"]
        return {r["msg_id"]: r for r in rc.db_query({"msg_id": {"$in": [lb_id, direct_id]}}, keys)}

    wait_until(lambda: lb_id in stored(), "the load-balanced task stored", 30)
    assert rc[victim].apply_sync(_pid) == victim_pid  # the engine's copies are in order
    wait_until(
        lambda: all(r["completed"] is not None for r in stored().values()), "records complete", 30
    )
    records = stored()
    assert records[lb_id]["status"] == "ok"
    assert records[lb_id]["engine_uuid"] != old_uuid
    assert records.get(direct_id, {"status": "engine_died"})["status"] == "engine_died"
    assert rc.get_result(lb_id, block=True).get(timeout=30) == other_pid
    assert not rc.outstanding
