"""A controller killed with tasks in flight and started again on the same profile, cluster
id and task store (issue 13 item 1): every task the clients had sent is answered once (its
result, or ControllerLost naming the dead controller); the engines find the new controller
on their own under their old ids; a client connected to the same connection file works."""

from __future__ import annotations

import os
import signal
import time

import pytest

import zpar
from tests.e2e.conftest import wait_until


def _work(x):

    time.sleep(0.02)
    return x * x


def test_engines_find_a_restarted_controller_and_no_task_is_answered_twice(make_cluster):
    c = make_cluster(n=2, cluster_id="restarted")  # not a throwaway: its store is kept
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    pids = sorted(
        e["pid"]
        for e in rc.sender.query(zpar.wire.messages.MsgType.ENGINE_INFO_REQUEST, {})
        .content["engines"]
        .values()
    )
    view = rc.load_balanced_view(retries=1)
    ars = [view.apply_async(_work, i) for i in range(300)]
    ars += [rc[i % 2].apply_async(_work, i) for i in range(300, 350)]
    # records are written every 50 ms (pending ones after 1 s): some must be in the store
    wait_until(lambda: rc.store_status()["saved"] >= 60, "60 records saved", 60)
    saved = rc.store_status()["saved"]
    lost_pid = c.launcher.controller.pid
    os.kill(lost_pid, signal.SIGKILL)
    c.launcher.controller.wait(30)

    lost = 0
    for i, ar in enumerate(ars):
        try:
            assert ar.get(timeout=60) == i * i
        except zpar.ControllerLost as e:
            assert str(lost_pid) in str(e)
            lost += 1
    assert lost, "every task finished before the kill: nothing was tested"
    with pytest.raises(zpar.ControllerLost):  # the old client does not reconnect
        view.apply_sync(_work, 1)

    c.launcher.start_controller(timeout=60)
    new = c.connect_client()
    try:
        new.wait_for_engines(2, timeout=90)  # the engines' own reconnection
        assert new.ids == [0, 1]
        info = new.sender.query(zpar.wire.messages.MsgType.ENGINE_INFO_REQUEST, {}).content[
            "engines"
        ]
        assert sorted(e["pid"] for e in info.values()) == pids  # the same processes
        assert new.load_balanced_view().map_sync(_work, range(20)) == [i * i for i in range(20)]
        assert new[:].apply_sync(_work, 3) == [9, 9]
        # the same store: what the old controller wrote is there, none of it left pending
        # (the tasks it never saw finish are marked lost)
        ids = [a.msg_ids[0] for a in ars]
        records = new.db_query({"msg_id": {"$in": ids}}, ["status", "completed"])
        assert len(records) >= min(saved, 1)
        assert all(r["completed"] is not None for r in records), records
    finally:
        new.close()


def test_engines_wait_out_a_controller_too_busy_to_answer(make_cluster):
    """A controller stopped (SIGSTOP) past the engines' silence limit and the registration
    timeout, as a hub drowning in work is: the engines restart, keep asking, and register
    again under their ids once it runs again."""
    c = make_cluster(n=2)
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    ctl = c.launcher.controller.pid

    def engine_logs() -> str:
        return "".join(
            p.read_text() for p in c.launcher.log_dir.glob(f"{c.launcher.cluster_id}-engine-*")
        )

    os.kill(ctl, signal.SIGSTOP)
    try:
        # the fault lasts until an engine gave up on heartbeats (5 s), restarted, and saw
        # a registration time out (10 s more) and asked again: however long that takes
        # on a loaded machine
        wait_until(lambda: "asking again" in engine_logs(), "a registration asked again", 120)
    finally:
        os.kill(ctl, signal.SIGCONT)
    new = c.connect_client()
    try:
        try:
            wait_until(lambda: new.ids == [0, 1], "engines 0 and 1 registered again", 90)
        except AssertionError as e:
            logs = "".join(
                f"--- {p.name}\n{p.read_text()[-4000:]}"
                for p in sorted(c.launcher.log_dir.glob(f"{c.launcher.cluster_id}-*"))
            )
            raise AssertionError(f"{e}; ids {new.ids}\n{logs}") from None
        assert new[:].apply_sync(_work, 2) == [4, 4]
    finally:
        new.close()
