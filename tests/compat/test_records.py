"""The hub's task records as ipyparallel's clients see them: ``hub_history()``,
``db_query`` with dates as datetimes (given back in queries), ``keys``, and task labels
(``set_flags(label=)``, ``temp_flags(label=)``, ``ar.label``, ``db_query({'label': ...})``).

Written from ipyparallel 9.2's tests/test_client.py (test_db_query_dt, test_hub_history,
test_db_query_keys, test_db_query_in) and tests/test_label.py."""

from __future__ import annotations

import itertools
import time
from datetime import datetime

import pytest

import zpar as ipp
from zpar.util import utc

pytestmark = pytest.mark.cluster


def _hub_knows(rc, msg_ids, timeout=10.0):
    """Wait until the hub has heard of these tasks finishing (it hears from batched copies,
    a moment after the client has the results)."""
    ids = list(msg_ids)
    deadline = time.monotonic() + timeout
    while len(rc.db_query({"msg_id": {"$in": ids}, "completed": {"$ne": None}})) < len(ids):
        assert time.monotonic() < deadline, "the hub did not hear of every task"
        time.sleep(0.05)


def test_db_query_dt(rc):
    """test db query by date"""
    for _ in range(4):
        rc[:].apply_sync(lambda: 1)
    _hub_knows(rc, rc.history)
    hist = rc.hub_history()
    middle = rc.db_query({"msg_id": hist[len(hist) // 2]})[0]
    tic = middle["submitted"]
    assert isinstance(tic, datetime) and tic.tzinfo is not None
    before = rc.db_query({"submitted": {"$lt": tic}})
    after = rc.db_query({"submitted": {"$gte": tic}})
    assert len(before) + len(after) == len(hist)
    assert all(b["submitted"] < tic for b in before)
    assert all(a["submitted"] >= tic for a in after)
    same = rc.db_query({"submitted": tic})
    assert [s["msg_id"] for s in same] == [middle["msg_id"]]


def test_record_dates_are_datetimes(rc):
    ar = rc.load_balanced_view().apply_async(lambda: 1)
    ar.get(10)
    _hub_knows(rc, ar.msg_ids)
    [rec] = rc.db_query({"msg_id": ar.msg_ids[0]})
    for key in ("submitted", "started", "completed", "received"):
        assert isinstance(rec[key], datetime) and rec[key].tzinfo is not None, key
    assert rec["submitted"] <= rec["started"] <= rec["completed"] <= rec["received"]
    assert isinstance(rec["header"]["date"], datetime)
    assert rec["submitted"] == ar.submitted  # the client's metadata says the same
    for key in ("submitted", "started", "completed", "received"):
        assert isinstance(ar.metadata[key], datetime), key


def test_hub_history(rc):
    rc.load_balanced_view().apply_sync(lambda: 1)
    hist = rc.hub_history()
    recs = {r["msg_id"]: r for r in rc.db_query({"msg_id": {"$ne": ""}})}
    latest = datetime(1984, 1, 1).replace(tzinfo=utc)
    for msg_id in hist:
        newt = recs[msg_id]["submitted"]
        assert newt >= latest
        latest = newt
    ar = rc[-1].apply_async(lambda: 1)
    ar.get()
    _hub_knows(rc, ar.msg_ids)
    assert rc.hub_history()[-1:] == ar.msg_ids


def test_db_query_keys_and_msg_id(rc):
    rc[:].apply_sync(lambda: 1)
    found = rc.db_query({"msg_id": {"$ne": ""}}, keys=["submitted", "completed"])
    assert found and all(set(r) == {"msg_id", "submitted", "completed"} for r in found)
    assert all(set(r) == {"msg_id"} for r in rc.db_query({"msg_id": {"$ne": ""}}, keys="msg_id"))
    for rec in rc.db_query({"msg_id": {"$ne": ""}}):
        assert "buffers" not in rec and "result_buffers" not in rec and "request" not in rec
        assert {"label", "received", "resubmitted"} <= set(rec)
    hist = rc.hub_history()
    even, odd = hist[::2], hist[1::2]
    assert {r["msg_id"] for r in rc.db_query({"msg_id": {"$in": even}})} == set(even)
    assert {r["msg_id"] for r in rc.db_query({"msg_id": {"$nin": even}})} == set(odd)


def _run_labelled(view):
    """ipyparallel's test_label.run_tasks: a map under temp_flags, applies under set_flags."""
    with view.temp_flags(label="mylabel_map"):
        mapped = view.map_async(lambda t: t, [1.1, 1.2, 1.3, 1.4, 1.5])
    applied = [
        view.set_flags(label=f"mylabel_apply_{i:02}").apply_async(lambda t: t, 2 + i / 10)
        for i in range(5)
    ]
    view.wait([mapped, *applied])
    return mapped, applied


def _labels_in_store(rc):
    data = rc.db_query({"label": {"$nin": [""]}}, keys=["msg_id", "label"])
    return sorted(d["label"] for d in data)


@pytest.mark.parametrize("kind", ["balanced", "direct"])
def test_labels(rc, kind):
    rc.purge_everything()
    view = rc.load_balanced_view() if kind == "balanced" else rc[:]
    mapped, applied = _run_labelled(view)
    # no wait for the hub: a query sees what the client saw finish (client/hubsync.py), as
    # ipyparallel's test_label queries right after view.wait
    n_apply = 1 if kind == "balanced" else len(rc.ids)
    expected = ["mylabel_map"] * len(mapped.msg_ids) + [
        f"mylabel_apply_{i:02}" for i in range(5) for _ in range(n_apply)
    ]
    assert _labels_in_store(rc) == sorted(expected)
    assert view.label == "mylabel_apply_04"  # set_flags stays, temp_flags did not
    labels = applied[2].label
    assert labels == ("mylabel_apply_02" if kind == "balanced" else ["mylabel_apply_02"] * 2)
    assert set(mapped.label) == {"mylabel_map"}
    if kind == "balanced":
        assert applied[2].metadata["label"] == "mylabel_apply_02"
    else:
        assert [md["label"] for md in applied[2].metadata] == ["mylabel_apply_02"] * 2
    found = rc.db_query({"label": "mylabel_apply_02"}, keys=["label", "engine_uuid"])
    assert len(found) == n_apply


def test_label_as_a_keyword_and_from_the_hub(rc, cluster):
    view = rc.load_balanced_view()
    ar = view.apply_async(lambda: 1)
    ar.get(10)
    assert ar.label is None
    ar = rc[:].execute("x = 1", label="L1", block=True)
    assert ar.label == ["L1", "L1"]
    _hub_knows(rc, ar.msg_ids)
    assert {r["msg_id"] for r in rc.db_query({"label": "L1"})} == set(ar.msg_ids)
    other = ipp.Client(str(cluster.url_file))
    try:
        fetched = other.get_result(ar.msg_ids)
        fetched.wait(10)
        assert fetched.label == ["L1", "L1"]
    finally:
        other.close()


def _square_or_fail(x):
    if x == 3:
        raise ValueError(f"no {x}")
    return x * x


def test_a_maps_elements_are_records_of_the_hub(rc, cluster):
    """ipyparallel's hub keeps one record per task of a chunksize=1 map: each of
    ``ar.msg_ids`` is in hub_history() and db_query, with its own dates and engine, and
    any client fetches its value (a list of one, as ipyparallel's element task returns)."""
    lv = rc.load_balanced_view()
    ar = lv.map_async(_square_or_fail, range(8), label="sq", return_exceptions=True)
    values = ar.get(30)
    assert isinstance(values[3], ipp.RemoteError)
    _hub_knows(rc, ar.msg_ids)
    hist = rc.hub_history()
    assert [m for m in hist if m in set(ar.msg_ids)] == ar.msg_ids
    recs = rc.db_query({"msg_id": {"$in": ar.msg_ids}})
    assert [r["msg_id"] for r in recs] == ar.msg_ids
    assert {r["label"] for r in recs} == {"sq"}
    for r in recs:
        for key in ("submitted", "started", "completed", "received"):
            assert isinstance(r[key], datetime) and r[key].tzinfo is not None, key
        assert r["submitted"] <= r["started"] <= r["completed"] <= r["received"]
        assert r["header"]["msg_id"] == r["msg_id"]
        assert isinstance(r["engine_uuid"], str) and r["engine_uuid"]
    assert [r["status"] for r in recs] == ["ok"] * 3 + ["error"] + ["ok"] * 4
    assert recs[3]["result_content"]["ename"] == "ValueError"
    other = ipp.Client(str(cluster.url_file))
    try:
        for j, m in enumerate(ar.msg_ids):
            fetched = other.get_result(m)
            if j == 3:
                with pytest.raises(ipp.RemoteError, match="no 3"):
                    fetched.get(10)
            else:
                assert fetched.get(10) == [j * j]
                assert fetched.metadata["engine_uuid"] == recs[j]["engine_uuid"]
        both = other.get_result(ar.msg_ids[4:6])
        assert both.get(10) == [[16], [25]]
        with pytest.raises(ipp.RemoteError, match="map's request"):  # names its elements
            other.get_result(ar.request_ids[0]).get(10)
    finally:
        other.close()


def test_one_element_of_a_map_is_resubmitted(rc):
    lv = rc.load_balanced_view()
    ar = lv.map_async(lambda x: x + 100, range(5))
    assert ar.get(30) == list(range(100, 105))
    # get_result of the map: one result per element, as ipyparallel's (a list of one each)
    assert rc.get_result(ar).get(10) == [[100], [101], [102], [103], [104]]
    again = rc.resubmit(ar.msg_ids[2])
    assert again.get(30) == [[102]]
    [new] = again.msg_ids
    _hub_knows(rc, [new])
    [old] = rc.db_query({"msg_id": ar.msg_ids[2]}, keys=["resubmitted"])
    assert old["resubmitted"] == new
    [rec] = rc.db_query({"msg_id": new})
    assert rec["status"] == "ok" and rec["completed"] is not None
    # the whole map: each element again, alone (ipyparallel's tasks of a chunksize=1 map)
    whole = rc.resubmit(ar)
    assert whole.get(30) == [[100], [101], [102], [103], [104]]


def test_a_maps_records_are_purged_together(rc):
    lv = rc.load_balanced_view()
    ar = lv.map_async(lambda x: x, range(10))
    ar.get(30)
    _hub_knows(rc, ar.msg_ids)
    assert len(ar.request_ids) < len(ar.msg_ids)  # several elements to a request
    with pytest.raises(Exception, match="purged together"):
        rc.purge_results(ar.msg_ids[:1])
    rc.purge_results(ar)
    assert rc.db_query({"msg_id": {"$in": ar.msg_ids}}) == []
    assert not set(ar.msg_ids) & set(rc.hub_history())


def _nap(t):
    import time

    time.sleep(t)
    return t


def test_each_element_has_its_own_dates(rc):
    """ipyparallel runs each element of a default map as its own task, with its own
    started / completed: in ar.metadata and in the hub's records, an element's dates are
    its own run's, not the span of the part that carried it back."""
    lv = rc.load_balanced_view()
    naps = [0.0, 0.3, 0.0, 0.0, 0.3, 0.0]
    ar = lv.map_async(_nap, naps)
    assert ar.get(30) == naps
    _hub_knows(rc, ar.msg_ids)
    recs = {
        r["msg_id"]: r
        for r in rc.db_query(
            {"msg_id": {"$in": ar.msg_ids}}, keys=["msg_id", "engine_uuid", "started", "completed"]
        )
    }
    by_engine: dict[str, list[tuple[datetime, datetime]]] = {}
    for m, t, md in zip(ar.msg_ids, naps, ar.metadata, strict=True):
        rec = recs[m]
        for key in ("started", "completed"):  # the same dates, whoever asks
            assert abs((rec[key] - md[key]).total_seconds()) < 1e-3, (m, key)
        assert md["started"] <= md["completed"]
        assert (md["completed"] - md["started"]).total_seconds() >= t - 1e-3
        by_engine.setdefault(md["engine_uuid"], []).append((md["started"], md["completed"]))
    for sub, md in zip(ar.split(), ar.metadata, strict=True):  # each its own task's
        smd = sub.metadata if isinstance(sub.metadata, dict) else sub.metadata[0]
        assert (smd["started"], smd["completed"]) == (md["started"], md["completed"])
        assert "element_times" not in smd and "element_times" not in md
    for spans in by_engine.values():  # one engine runs one element at a time
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, spans
