"""The task scheduler path on two real engines."""

from __future__ import annotations

import os

import pytest

import zpar


def test_lb_apply(rc):
    lv = rc.load_balanced_view()
    ar = lv.apply_async(os.getpid)
    pid = ar.get(timeout=10)
    assert isinstance(pid, int) and pid != os.getpid()
    assert ar.engine_id in rc.ids


def test_lb_map_1000_tasks_in_order_over_both_engines(rc):
    lv = rc.load_balanced_view()
    # one task per element: the default's two chunks may both go to one engine that
    # finished the first before the second reached the scheduler
    ar = lv.map_async(lambda i: (i, os.getpid()), range(1000), chunksize=1)
    out = ar.get(timeout=60)
    assert [i for i, _ in out] == list(range(1000))
    assert len({pid for _, pid in out}) == 2, "both engines should have taken tasks"


def test_lb_map_chunksize(rc):
    lv = rc.load_balanced_view()
    assert lv.map_sync(lambda i: i * i, range(250), chunksize=16) == [i * i for i in range(250)]


def test_lb_targets_restrict_placement(rc):
    lv = rc.load_balanced_view(targets=[1])
    ars = [lv.apply_async(os.getpid) for _ in range(20)]
    ids = {ar.engine_id for ar in ars if ar.wait(30)}  # metadata reads never wait
    assert ids == {1}


def test_lb_remote_error(rc):
    lv = rc.load_balanced_view()
    with pytest.raises(zpar.RemoteError, match="ValueError"):
        lv.apply_sync(int, "not a number")


def test_queue_status_counts_completed(rc):
    lv = rc.load_balanced_view()
    lv.map_sync(abs, range(10))
    status = rc.queue_status()
    assert set(rc.ids) <= set(status)
    assert sum(status[i]["completed"] for i in rc.ids) >= 10


def test_lb_map_one_task_per_element_and_unordered_iteration(rc):
    lv = rc.load_balanced_view()
    ar = lv.map_async(lambda x: x + 1, range(1000))
    assert len(ar.msg_ids) == 1000  # one task per element as users observe, as ipyparallel
    assert ar.get(timeout=30) == list(range(1, 1001))
    ar = lv.map_async(lambda x: x, range(10), chunksize=1, ordered=False)
    assert sorted(ar) == list(range(10)) and len(ar.msg_ids) == 10
