"""A load-balanced map's elements as the hub's records (hub/elementparts.py, elementquery.py):
the request's record takes its parts as the scheduler reports them, the store keeps one row
per request and per part, and queries see one record per element, as ipyparallel's hub
keeps one per task of a chunksize=1 map. Sans-IO: the TaskTable, its StoreWriter and a
store (memory and SQLite), no socket."""

from __future__ import annotations

from array import array

import pytest

from zpar.elements import (
    ELEMENTS,
    ERRORS,
    FINAL,
    RETRYING,
    STDERRS,
    STDOUTS,
    TIMES,
    element_id,
    pack_times,
    times_as_text,
    times_from_text,
)
from zpar.hub import elementquery
from zpar.hub.elementparts import MAP_QUEUE, PART_QUEUE
from zpar.hub.recorder import StoreWriter
from zpar.hub.records import TaskTable
from zpar.hub.stores import MemoryStore, open_store
from zpar.hub.stores.base import check_keys, check_query


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore()
    else:
        s = open_store(f"sqlite:///{tmp_path / 'tasks.db'}")
        yield s
        s.close()


def _request(table, msg_id="m", n=6, label="L1", date=100.0):
    header = {"msg_id": msg_id, "msg_type": "apply_request", "date": date, "session": "s"}
    md = {ELEMENTS: [0, n], "label": label}
    table.submitted(header, "task", b"client", None, md, request=b"req")
    table.assigned(msg_id, "e0")


def _part(table, msg_id, a, b, engine="e0", t=(101.0, 102.0), errors=None, final=False, **md):
    content = {"status": "ok", ELEMENTS: [a, b]}
    if errors:
        content[ERRORS] = errors
    if final:
        content[FINAL] = True
    meta = {"status": "ok", "started": t[0], "completed": t[1], "stdout": f"out {a}", **md}
    return table.finished(msg_id, engine, meta, "ok", content)


def _find(store, query, keys=None):
    return elementquery.find(store, check_query(query), check_keys(keys))


def test_parts_make_one_record_per_element(store):
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table)
    table.submitted({"msg_id": "plain", "msg_type": "apply_request", "date": 99.0}, "task", b"c")
    table.finished("plain", "e1", {"status": "ok"}, "ok", {"status": "ok"})
    err = {"status": "error", "ename": "ZeroDivisionError", "evalue": "x", "traceback": []}
    part = _part(table, "m", 0, 3, errors={"1": err})
    assert part is not None and part.queue == PART_QUEUE
    assert table.records["m"].pending  # three of six answered
    # the tail placed on another engine under a part id (zpar.elements.part_id)
    _part(table, "m#3.1", 3, 6, engine="e1", t=(101.5, 103.0), final=True)
    rec = table.records["m"]
    assert not rec.pending and rec.status == "error"
    assert (rec.started, rec.completed) == (101.0, 103.0)
    assert w.flush(everything=True)

    rows = store.find(check_query({}), check_keys(["queue"]))
    assert sorted(r["queue"] for r in rows) == sorted([MAP_QUEUE, PART_QUEUE, PART_QUEUE, "task"])

    found = _find(store, {"label": "L1"})
    ids = [element_id("m", j) for j in range(6)]
    assert [r["msg_id"] for r in found] == ids
    assert [r["engine_uuid"] for r in found] == ["e0"] * 3 + ["e1"] * 3
    assert [r["status"] for r in found] == ["ok", "error", "ok", "ok", "ok", "ok"]
    assert found[1]["result_content"]["ename"] == "ZeroDivisionError"
    assert found[0]["result_content"] == {"status": "ok"}
    assert [r["completed"] for r in found] == [102.0] * 3 + [103.0] * 3
    assert all(r["submitted"] == 100.0 and r["label"] == "L1" for r in found)
    assert all(r["header"]["msg_id"] == r["msg_id"] for r in found)
    assert [r["stdout"] for r in found] == [
        "",
        "",
        "out 0",
        "",
        "",
        "out 3",
    ]  # a part's, on its last
    assert elementquery.history(store) == ["plain", *ids]
    # a query on element ids selects only those, whatever other keys it names
    some = _find(store, {"msg_id": {"$in": ids[2:4]}, "completed": {"$ne": None}}, ["label"])
    assert some == [{"msg_id": ids[2], "label": "L1"}, {"msg_id": ids[3], "label": "L1"}]
    assert [r["msg_id"] for r in _find(store, {"engine_uuid": "e1"})] == ["plain", *ids[3:]]
    # the request is no record of its own; named, it selects its elements
    assert [r["msg_id"] for r in _find(store, {"msg_id": "m"})] == ids
    assert [r["msg_id"] for r in _find(store, {"msg_id": {"$ne": ""}})] == ["plain", *ids]
    assert [r["msg_id"] for r in _find(store, {"status": "error"})] == [ids[1]]


def test_each_element_has_its_own_output(store):
    """A part whose elements printed carries each one's text (zpar.elements.STDOUTS): each
    element's record has its own, as ipyparallel's one task per element."""
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=3)
    own = {STDOUTS: {"0": "a\n", "2": "c\n"}, STDERRS: {"2": "e\n"}}
    _part(table, "m", 0, 3, final=True, stdout="a\nc\n", stderr="e\n", **own)
    assert w.flush(everything=True)
    found = _find(store, {"label": "L1"}, ["stdout", "stderr", "metadata"])
    assert [(r["stdout"], r["stderr"]) for r in found] == [("a\n", ""), ("", ""), ("c\n", "e\n")]
    assert not any(STDOUTS in r["metadata"] or STDERRS in r["metadata"] for r in found)


def test_an_element_result_names_its_parts_values(store):
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=4)
    part = _part(table, "m", 0, 2)
    w.add_buffers(part.msg_id, [b"values 0-1"])
    part = _part(table, "m", 2, 4, final=True)
    w.add_buffers(part.msg_id, [b"values 2-3"])
    assert w.flush(everything=True)
    got = elementquery.get(store, [element_id("m", 3), element_id("m", 0), "nope#1"], True)
    assert set(got) == {element_id("m", 3), element_id("m", 0)}
    assert got[element_id("m", 3)]["buffers"] == [b"values 2-3"]
    assert got[element_id("m", 3)][ELEMENTS] == [2, 4]
    assert got[element_id("m", 0)][ELEMENTS] == [0, 2]
    assert got[element_id("m", 0)]["completed"] == 102.0
    # the request's own id: an error that names its elements
    request = elementquery.get(store, ["m"], True)["m"]
    assert "map's request" in request["result_content"]["evalue"] and request["buffers"] == []


def test_a_request_answered_by_one_part_is_one_row(store):
    """Its part (the common case: a run of elements answered at once) is kept in the
    request's own row (elementparts.INLINE): one row and its buffers, and every element's
    record as with a part row: its dates, status, error, output and its part's values."""
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=3)
    err = {"status": "error", "ename": "KeyError", "evalue": "k", "traceback": []}
    clock = 1_795_000_000.0
    times = pack_times(clock, 1.0, array("d", [1.5, 2.0, 2.25]))
    part = _part(
        table, "m", 0, 3, errors={"1": err}, final=True, element_times=times,
        stdout="a\n", **{STDOUTS: {"0": "a\n"}},
    )  # fmt: skip
    assert part is table.records["m"]  # its buffers go with the request's row
    w.add_buffers(part.msg_id, [b"values 0-2"])
    assert w.flush(everything=True)
    rows = store.find(check_query({}), check_keys(["queue"]))
    assert [r["queue"] for r in rows] == [MAP_QUEUE]
    found = _find(store, {"label": "L1"})
    assert [(r["started"], r["completed"]) for r in found] == [
        (clock + 1.0, clock + 1.5),
        (clock + 1.5, clock + 2.0),
        (clock + 2.0, clock + 2.25),
    ]
    assert [r["status"] for r in found] == ["ok", "error", "ok"]
    assert found[1]["result_content"]["ename"] == "KeyError"
    assert [r["stdout"] for r in found] == ["a\n", "", ""]
    assert not any(TIMES in r["metadata"] or STDOUTS in r["metadata"] for r in found)
    got = elementquery.get(store, [element_id("m", 2)], True)[element_id("m", 2)]
    assert got["buffers"] == [b"values 0-2"] and got[ELEMENTS] == [0, 3]
    assert elementquery.get(store, ["m"], True)["m"]["buffers"] == []


def test_pending_elements_and_retried_ones(store):
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=4)
    err = {"status": "error", "ename": "E", "evalue": "", "traceback": []}
    # element 1 failed and is placed again (the request's retries): not its answer yet
    _part(table, "m", 0, 2, errors={"1": err}, **{RETRYING: [1]})
    assert w.flush(everything=True)
    got = elementquery.get(store, [element_id("m", j) for j in range(4)], False)
    assert [got[element_id("m", j)]["completed"] for j in range(4)] == [102.0, 102.0, None, None]
    _part(table, "m#1.2", 1, 2, engine="e1", t=(104.0, 105.0), final=True)
    _part(table, "m", 2, 4, final=True)
    assert not table.records["m"].pending and table.records["m"].status == "ok"
    assert w.flush(everything=True)
    found = _find(store, {})
    assert [r["status"] for r in found] == ["ok"] * 4
    assert [r["engine_uuid"] for r in found] == ["e0", "e1", "e0", "e0"]


def test_a_map_is_purged_whole(store):
    """With its part rows; a request answered by one part has none (its row holds it)."""
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=3)
    _part(table, "m", 0, 3, final=True)
    _request(table, "two", n=3)
    _part(table, "two", 0, 1)
    _part(table, "two", 1, 3, final=True)
    assert w.flush(everything=True)
    ids = [element_id("m", j) for j in range(3)]
    assert "purged together" in elementquery.purge_ids(store, ids[:2])
    doomed = elementquery.purge_ids(store, ids)
    assert sorted(doomed) == ["m"]
    two = elementquery.purge_ids(store, [element_id("two", j) for j in range(3)])
    assert sorted(two) == ["two", "two#p0", "two#p1"]
    store.delete([*doomed, *two], None)
    assert store.count() == 0 and elementquery.history(store) == []


def test_a_whole_run_failure_answers_what_is_left(store):
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=4)
    _part(table, "m", 0, 1)
    # its engine died: the scheduler answers the placement's positions in its stead
    died = {"status": "error", "ename": "EngineError", "evalue": "died", ELEMENTS: [1, 4]}
    table.finished("m", "e0", {"status": "error"}, "error", died)
    rec = table.records["m"]
    assert not rec.pending and rec.status == "error"
    assert w.flush(everything=True)
    found = _find(store, {}, ["status", "result_content"])
    assert [r["status"] for r in found] == ["ok", "error", "error", "error"]
    assert found[2]["result_content"]["ename"] == "EngineError"


def test_each_element_has_its_own_dates_and_the_store_keeps_them_as_base64(store):
    """A part's TIMES (zpar.elements) are bytes on the wire; the hub keeps them as base64
    text (a JSON store escapes raw bytes to ~4 characters each); rows written before, as
    latin-1 text of float64s (records.jsonable), still read."""
    table = TaskTable()
    w = StoreWriter(store, table)
    _request(table, n=4)
    clock = 1_795_000_000.0
    times = pack_times(clock, 10.0, array("d", [10.5, 11.25]))
    _part(table, "m", 0, 2, t=(clock + 10.0, clock + 11.25), element_times=times)
    latin = array("d", [clock, 20.0, 20.5, 21.0]).tobytes().decode("latin-1")
    _part(table, "m", 2, 4, t=(clock + 20.0, clock + 21.0), final=True, element_times=latin)
    assert w.flush(everything=True)

    parts = [r for r in store.find(check_query({}), check_keys(["queue", "metadata"]))]
    stored = [r["metadata"][TIMES] for r in parts if r["queue"] == PART_QUEUE]
    assert times_as_text(times) in stored and times_from_text(times_as_text(times)) == times
    found = _find(store, {"label": "L1"})
    assert [(r["started"], r["completed"]) for r in found] == [
        (clock + 10.0, clock + 10.5),
        (clock + 10.5, clock + 11.25),
        (clock + 20.0, clock + 20.5),
        (clock + 20.5, clock + 21.0),
    ]
    assert all(TIMES not in r["metadata"] for r in found)
    assert times_from_text("not base64 !") is None
