"""ipyparallel/client/client.py ``Client.resubmit`` and its hub's ``resubmit_task``: tasks
run again under new msg_ids, from the requests the hub keeps with their records.

The first tests are ipyparallel 9.2's own (tests/test_client.py: test_resubmit,
_chain, _header, _aborted, _inflight, _badkey), written as there."""

from __future__ import annotations

import time

import pytest

import zpar as ipp
from tests.clusters import wait_until
from zpar import error

pytestmark = pytest.mark.cluster


def _random():
    import random

    return random.random()


def _wait_for_idle(rc):
    """ipyparallel's ClusterTestCase._wait_for_idle: every request known to the hub, done."""
    rc.wait(timeout=5)
    msg_ids = set(rc.history)
    deadline = time.monotonic() + 10
    while msg_ids.difference(rc.hub_history()):
        assert time.monotonic() < deadline, "the hub did not hear of every request"
        time.sleep(0.05)
    while True:
        qs = rc.queue_status()
        busy = qs["unassigned"] or any(
            qs[e]["tasks"] + qs[e]["queue"] for e in qs if e != "unassigned"
        )
        if not busy:
            return
        assert time.monotonic() < deadline, f"the cluster is still busy: {qs}"
        time.sleep(0.05)


def test_resubmit(rc):
    v = rc.load_balanced_view()
    ar = v.apply_async(_random)
    r1 = ar.get(10)
    _wait_for_idle(rc)
    ahr = rc.resubmit(ar.msg_ids)
    assert isinstance(ahr, ipp.AsyncHubResult)
    r2 = ahr.get(10)
    assert isinstance(r2, list) and len(r2) == 1  # a list of msg_ids in: a list out
    assert r1 != r2[0]
    assert ahr.msg_ids != ar.msg_ids


def test_resubmit_chain(rc):
    """resubmit resubmitted tasks"""
    v = rc.load_balanced_view()
    ar = v.apply_async(lambda x: x, "x" * 1024)
    ar.get(10)
    _wait_for_idle(rc)
    ars = [ar]
    for _ in range(10):
        ars.append(rc.resubmit(ars[-1].msg_ids))
    assert [a.get(10) for a in ars[1:]] == [["x" * 1024]] * 10
    assert len({a.msg_ids[0] for a in ars}) == 11


def test_resubmit_header(rc):
    """resubmit shouldn't clobber the whole header"""
    v = rc.load_balanced_view()
    v.retries = 1
    ar = v.apply_async(_random)
    ar.get(10)
    _wait_for_idle(rc)
    ahr = rc.resubmit(ar.msg_ids)
    ahr.get(10)
    records = rc.db_query({"msg_id": {"$in": ar.msg_ids + ahr.msg_ids}}, keys="header")
    h1, h2 = (r["header"] for r in records)
    for key in set(h1.keys()).union(set(h2.keys())):
        if key in ("msg_id", "date"):
            assert h1[key] != h2[key]
        else:
            assert h1[key] == h2[key]


def test_resubmit_aborted(rc):
    v = rc.load_balanced_view()
    # restrict to one engine, so we can put a sleep ahead of the task, so it will be aborted
    v.targets = [rc.ids[-1]]
    sleep = v.apply_async(time.sleep, 0.5)
    ar = v.apply_async(_random)
    ar.abort()
    with pytest.raises(error.TaskAborted):
        ar.get(10)
    sleep.get(10)
    _wait_for_idle(rc)
    assert isinstance(rc.resubmit(ar.msg_ids).get(10)[0], float)


def test_resubmit_inflight(rc):
    """resubmit of inflight task"""
    v = rc.load_balanced_view()
    ar = v.apply_async(time.sleep, 1)
    # in flight: the hub has recorded it started on an engine (ipyparallel slept 0.2 s)
    wait_until(
        lambda: any(r.get("started") for r in rc.db_query({"msg_id": ar.msg_ids[0]}, ["started"])),
        "the task started",
        10,
    )
    ahr = rc.resubmit(ar.msg_ids)
    ar.get(5)
    assert ahr.get(5) == [None]


def test_resubmit_badkey(rc):
    """ensure KeyError on resubmit of nonexistant task"""
    with pytest.raises(error.RemoteError) as info:
        rc.resubmit(["invalid"])
    assert info.value.ename == "KeyError" and "invalid" in str(info.value)


def test_resubmit_defaults_to_the_last_task_and_takes_history_indices(rc):
    v = rc.load_balanced_view()
    first = v.apply_async(lambda: "first")
    last = v.apply_async(lambda: "last")
    assert (first.get(10), last.get(10)) == ("first", "last")
    assert rc.resubmit(block=True).get() == ["last"]  # indices_or_msg_ids=None: -1
    assert rc.resubmit([first, last]).get(10) == ["first", "last"]


def test_a_direct_task_is_resubmitted_load_balanced(rc):
    """A MUX request's bytes reach the hub in the relay's (or engine's) copy."""
    ar = rc[0].apply_async(lambda a, b: a + b, 20, b=22)
    assert ar.get(10) == 42
    ahr = rc.resubmit(ar.msg_ids, block=True)
    assert ahr.get() == [42]
    [rec] = rc.db_query({"msg_id": ahr.msg_ids[0]}, keys=["queue", "header"])
    assert rec["queue"] == "task" and rec["header"]["dest"] == "task"


def test_another_client_resubmits_and_the_store_links_old_to_new(rc, cluster):
    ar = rc.load_balanced_view().apply_async(lambda: 7)
    ar.get(10)
    other = ipp.Client(str(cluster.url_file))
    try:
        ahr = other.resubmit(ar.msg_ids)
        assert ahr.get(10) == [7]
    finally:
        other.close()
    [old] = rc.db_query({"msg_id": ar.msg_ids[0]}, keys=["resubmitted"])
    assert old["resubmitted"] == ahr.msg_ids[0]
    assert rc.get_result(ahr.msg_ids).get(10) == [7]


def test_flags_survive_a_resubmission_but_not_dependencies(rc):
    v = rc.load_balanced_view()
    before = v.apply_async(lambda: 1)
    before.get(10)
    with v.temp_flags(label="again", after=before, retries=1):
        ar = v.apply_async(lambda: 2)
    ar.get(10)
    ahr = rc.resubmit(ar.msg_ids, block=True)
    [rec] = rc.db_query({"msg_id": ahr.msg_ids[0]}, keys=["label", "metadata"])
    assert rec["label"] == "again" and rec["metadata"]["retries"] == 1
    assert "after" not in rec["metadata"]


def test_a_request_larger_than_the_store_keeps_cannot_be_resubmitted(rc):
    from zpar.constants import STORE_RESULT_LIMIT

    big = b"x" * (STORE_RESULT_LIMIT + 1)
    ar = rc.load_balanced_view().apply_async(len, big)
    assert ar.get(10) == len(big)
    with pytest.raises(error.ZparError, match="did not keep the request"):
        rc.resubmit(ar.msg_ids)


def test_a_failed_task_resubmitted_fails_again_with_its_error(rc):
    def fail():
        raise ValueError("again and again")

    ar = rc.load_balanced_view().apply_async(fail)
    with pytest.raises(error.RemoteError, match="again and again"):
        ar.get(10)
    with pytest.raises(error.RemoteError) as info:
        rc.resubmit(ar.msg_ids).get(10)
    assert info.value.ename == "ValueError"
