"""Aborting elements of a load-balanced map, as ipyparallel aborts the tasks of a chunksize=1
map: each element id (``ar.msg_ids[i]``) is a task of its own, so ``rc.abort``,
``lv.abort`` and ``ar.abort()`` of a result of some elements abort those (not started yet)
and only those; the others run and return their values.

ipyparallel 9.2.0's behaviour, read in its code and run against a real ipyparallel cluster
(client.py ``abort``, engine/kernel.py ``abort_request`` / ``should_handle``,
asyncresult.py ``abort``, error.py ``collect_exceptions``):

- the engine keeps the msg_ids named and answers ``status: aborted`` when it reaches one;
  its AsyncResult raises ``TaskAborted`` (``successful()`` False);
- a running task runs on (``ar.abort()`` of a done result: RuntimeError "Can't abort, I am
  already done!"); naming a finished one does nothing;
- the hub's record holds ``result_content: {'status': 'aborted'}`` for that task alone;
- a map with some tasks aborted: ipyparallel never resolves its AsyncResult (``joinPartitions``
  iterates the TaskAborted: TypeError in a done-callback) while iteration gives the
  TaskAborted in place; zpar raises a CompositeError of the TaskAborted from ``get()`` and
  gives them in place with ``return_exceptions=True`` (docs/decisions.md, "Aborting single
  elements of a map").
- ids: a job neither a str nor an AsyncResult is a TypeError, as in ipyparallel; another
  client's tasks may be aborted, as in ipyparallel; an id neither sent by this client nor
  in the hub's records gets a warning naming it and is sent on (ipyparallel sends it
  without a word; the hub has no record of a direct task still queued, so an error would
  refuse a real task).
"""

from __future__ import annotations

import warnings

import pytest

import zpar
from tests.e2e.conftest import wait_for_files, wait_until
from tests.e2e.test_lbmap import SAFETY, Gate, blocked_if
from zpar.errors import CompositeError, TaskAborted

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def started_map(rc, gate, n=8):
    """A map of ``n`` on engine 0 whose element 1 runs until ``gate`` opens: 0 done, 2..
    not started."""
    lv = rc.load_balanced_view(targets=[0])
    ar = lv.map_async(blocked_if, [gate.path] * n, [1] * n, range(n))
    wait_for_files(gate.path + ".started")
    return lv, ar


def aborted_at(out):
    return [i for i, v in enumerate(out) if isinstance(v, TaskAborted)]


def statuses(rc, msg_ids):
    """{element id: status} of the hub's records."""
    rows = rc.db_query({"msg_id": {"$in": msg_ids}}, keys=["msg_id", "result_content"])
    return {r["msg_id"]: (r.get("result_content") or {}).get("status") for r in rows}


def test_abort_of_one_element_aborts_it_alone(rc, tmp_path):
    gate = Gate(tmp_path / "gate")
    try:
        _, ar = started_map(rc, gate)
        rc.abort(ar.msg_ids[4])
        assert rc.wait(ar.msg_ids[4], timeout=SAFETY)  # answered while 1 still runs
        assert not gate.forced and not ar.ready()
        assert ar.progress == 2 or ar.progress == 1  # 4, and 0 once its part left
    finally:
        gate.close()
    out = ar.get(timeout=60, return_exceptions=True)
    assert aborted_at(out) == [4], out
    assert [v for i, v in enumerate(out) if i != 4] == [0, 1, 2, 3, 5, 6, 7]
    assert "element 4 of task" in str(out[4])
    assert ar.done() and not ar.successful()
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    assert [type(e) for e in info.value.errors] == [TaskAborted]
    # the element's own result, from this client and from the hub's records
    with pytest.raises(TaskAborted):
        rc.get_result(ar.msg_ids[4]).get(timeout=30)
    assert ar.metadata[4]["status"] == "aborted" and ar.metadata[3]["status"] == "ok"
    want = {m: ("aborted" if i == 4 else "ok") for i, m in enumerate(ar.msg_ids)}
    wait_until(lambda: statuses(rc, ar.msg_ids) == want, "records of the elements", 30)


def test_the_hub_answers_for_an_aborted_element_and_runs_it_again(rc, tmp_path, cluster):
    gate = Gate(tmp_path / "gate")
    try:
        _, ar = started_map(rc, gate, n=4)
        rc.abort(ar.msg_ids[2])
        assert rc.wait(ar.msg_ids[2], timeout=SAFETY)
    finally:
        gate.close()
    assert aborted_at(ar.get(timeout=60, return_exceptions=True)) == [2]
    want = {m: ("aborted" if i == 2 else "ok") for i, m in enumerate(ar.msg_ids)}
    wait_until(lambda: statuses(rc, ar.msg_ids) == want, "records of the elements", 30)
    other = zpar.Client(cluster.url_file)  # results from the hub's records, not this client's
    try:
        with pytest.raises(TaskAborted):
            other.get_result(ar.msg_ids[2]).get(timeout=30)
        assert other.get_result(ar.msg_ids[3]).get(timeout=30) is not None
    finally:
        other.close()
    # an aborted task can be resubmitted (ipyparallel's test_resubmit_aborted)
    assert rc.resubmit(ar.msg_ids[2]).get(timeout=30) in (2, [2], [[2]])  # shape: resubmit's


def test_an_element_of_a_map_still_held_in_the_clients_window(cluster, tmp_path):
    """The map has not reached the scheduler when the abort does: the scheduler keeps the
    positions named until it comes."""
    client = zpar.Client(cluster.url_file, window=1)
    gate = Gate(tmp_path / "gate")
    try:
        client.wait_for_engines(2, timeout=30)
        lv = client.load_balanced_view(targets=[0])
        first = lv.apply_async(blocked_if, gate.path, 1, 1)  # the window's one request
        wait_for_files(gate.path + ".started")
        ar = lv.map_async(abs, range(6))  # held in this client until ``first`` answers
        client.abort(ar.msg_ids[3])
        assert not ar.ready()
        gate.close()
        assert first.get(timeout=60) == 1
        out = ar.get(timeout=60, return_exceptions=True)
        assert aborted_at(out) == [3], out
        assert [v for i, v in enumerate(out) if i != 3] == [0, 1, 2, 4, 5]
    finally:
        gate.close()
        client.close()


def test_several_ids_a_view_and_a_result_of_some_elements(rc, tmp_path):
    gate = Gate(tmp_path / "gate")
    try:
        lv, ar = started_map(rc, gate, n=10)
        rc.abort(jobs=[ar.msg_ids[2], ar.msg_ids[3]])
        lv.abort([ar.msg_ids[6]])
        some = rc.get_result(ar.msg_ids[8:10], block=False)
        some.abort()
        assert rc.wait([ar.msg_ids[i] for i in (2, 3, 6, 8, 9)], timeout=SAFETY)
        assert not gate.forced and not ar.ready()
    finally:
        gate.close()
    out = ar.get(timeout=60, return_exceptions=True)
    assert aborted_at(out) == [2, 3, 6, 8, 9], out
    assert [out[i] for i in (0, 1, 4, 5, 7)] == [0, 1, 4, 5, 7]
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    assert len(info.value.errors) == 5
    with pytest.raises(CompositeError) as info:  # two calls: zpar's CompositeError
        some.get(timeout=30)
    assert [type(e) for e in info.value.errors] == [TaskAborted, TaskAborted]


def test_finished_and_running_elements_are_left_as_they_are(rc, tmp_path):
    gate = Gate(tmp_path / "gate")
    try:
        _, ar = started_map(rc, gate, n=4)
        assert rc.wait(ar.msg_ids[0], timeout=SAFETY)
        rc.abort([ar.msg_ids[0], ar.msg_ids[1]])  # finished, running: nothing to abort
        done = rc.get_result(ar.msg_ids[0], block=False)
        done.wait(30)
        with pytest.raises(RuntimeError, match="already done"):
            done.abort()  # as ipyparallel's AsyncResult.abort
    finally:
        gate.close()
    assert ar.get(timeout=60) == [0, 1, 2, 3] and ar.successful()


def test_bad_ids_are_named(rc, tmp_path, cluster):
    lv = rc.load_balanced_view()
    ar = lv.map_async(abs, range(4))
    ar.get(timeout=30)
    request = ar.msg_ids[0].rsplit("#", 1)[0]
    with pytest.raises(TypeError, match="5"):
        rc.abort(5)
    with pytest.raises(TypeError):
        lv.abort([ar.msg_ids[0], 3.5])
    with pytest.warns(UserWarning, match="'no-such-task': neither sent by this client"):
        rc.abort("no-such-task")
    with pytest.warns(UserWarning, match=f"{request}#99"):
        rc.abort(f"{request}#99")  # past the map's end
    other = zpar.Client(cluster.url_file)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # another client's finished element: no-op
            other.abort(ar.msg_ids[1])
        with pytest.warns(UserWarning, match="no-such-task"):
            other.abort("no-such-task")
    finally:
        other.close()
    assert ar.get(timeout=30) == [0, 1, 2, 3]


def test_another_client_aborts_an_element_of_a_running_map(rc, tmp_path, cluster):
    """As ipyparallel (any client may abort any msg_id) and the dashboard's abort."""
    gate = Gate(tmp_path / "gate")
    other = zpar.Client(cluster.url_file)
    try:
        _, ar = started_map(rc, gate, n=6)
        wait_until(lambda: other.db_query({"msg_id": ar.msg_ids[3]}, keys=["msg_id"]), "record")
        other.abort(ar.msg_ids[3])
        assert rc.wait(ar.msg_ids[3], timeout=SAFETY) and not gate.forced
    finally:
        gate.close()
        other.close()
    out = ar.get(timeout=60, return_exceptions=True)
    assert aborted_at(out) == [3] and out[:3] == [0, 1, 2] and out[4:] == [4, 5], out
