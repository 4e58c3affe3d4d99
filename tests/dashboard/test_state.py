"""DashboardState (dashboard/state.py) fed plain records: no socket, no thread."""

from __future__ import annotations

from types import SimpleNamespace

from zpar.dashboard.state import MAX_BARS, DashboardState
from zpar.hub.records import (
    FEED_REGISTERED,
    FEED_SUBMITTED,
    FEED_UNREGISTERED,
    TaskRecord,
    finished_event,
)

NOW = 1_800_000_000.0


def engine(eid: int, uuid: str) -> SimpleNamespace:
    return SimpleNamespace(id=eid, uuid=uuid, hostname="node1", pid=100 + eid, registered=NOW)


def task(msg_id: str, eng: str, status: str = "ok", func: str = "square", t: float = NOW):
    rec = TaskRecord(msg_id, "apply_request", "task", client=b"\x01\x02", engine_uuid=eng)
    rec.submitted, rec.started, rec.completed = t - 0.5, t - 0.2, t
    rec.status = status
    rec.metadata = {"func": func, "label": "run-1"}
    if status != "ok":
        rec.result_content = {
            "ename": "ValueError",
            "evalue": "bad input 3",
            "traceback": ["Traceback (most recent call last):", "ValueError: bad input 3"],
        }
    return rec


def fed(*events) -> DashboardState:
    st = DashboardState()
    st.apply(list(events), NOW)
    return st


def test_a_bar_per_finished_task_on_its_engine_row_coloured_by_function():
    a, b = engine(0, "ua"), engine(1, "ub")
    t1, t2, t3 = task("m1", "ua"), task("m2", "ub", func="cube"), task("m3", "ua")
    st = fed(
        (FEED_REGISTERED, a),
        (FEED_REGISTERED, b),
        *[(FEED_SUBMITTED, t.client) for t in (t1, t2, t3)],
        *[finished_event(t) for t in (t1, t2, t3)],
    )
    view = st.view(NOW + 1)
    assert [(bar[1], bar[4], bar[6]) for bar in view["bars"]] == [
        (0, "square", "m1"),
        (1, "cube", "m2"),
        (0, "square", "m3"),
    ]
    assert view["funcs"] == {"square": 0, "cube": 1}
    assert view["bars"][0][2:4] == (NOW - 0.2, NOW)  # start -> end
    assert view["engine_count"] == 2
    # a WebSocket that saw bar 2 gets bar 3 alone
    assert [bar[6] for bar in st.view(NOW + 1, since=2)["bars"]] == ["m3"]


def test_failures_are_marked_counted_and_keep_their_traceback():
    a = engine(0, "ua")
    bad = task("m9", "ua", status="error")
    st = fed((FEED_REGISTERED, a), (FEED_SUBMITTED, bad.client), finished_event(bad))
    view = st.view(NOW + 1)
    assert view["bars"][0][5] is True
    assert view["engines"][0]["failed"] == 1
    assert view["clients"][0]["failed"] == 1
    assert "ValueError: bad input 3" in st.recent["m9"]["traceback"]
    assert st.search({"msg_id": "m9"})[0]["status"] == "error"
    assert "traceback" not in st.search({"msg_id": "m9"})[0]


def test_search_by_function_label_status_and_engine():
    a, b = engine(0, "ua"), engine(1, "ub")
    recs = [task("m1", "ua"), task("m2", "ub", func="cube"), task("m3", "ub", status="error")]
    st = fed((FEED_REGISTERED, a), (FEED_REGISTERED, b), *[finished_event(r) for r in recs])
    ids = lambda q: [r["msg_id"] for r in st.search(q)]  # noqa: E731
    assert ids({"func": "cube"}) == ["m2"]
    assert ids({"status": "error"}) == ["m3"]
    assert ids({"engine": "1"}) == ["m3", "m2"]  # newest first
    assert ids({"label": "run-1", "engine": "0"}) == ["m1"]
    assert ids({"func": "nothing"}) == []


def test_engine_states_idle_busy_dead_replaced():
    a, b = engine(0, "ua"), engine(1, "ub")
    st = fed((FEED_REGISTERED, a), (FEED_REGISTERED, b))
    rows = [
        {"id": 0, "uuid": "ua", "host": "node1", "pid": 100, "registered": NOW, "in_hand": 3, "done": 5,
         "cpu": 97.0, "rss": 50 << 20},
        {"id": 1, "uuid": "ub", "host": "node1", "pid": 101, "registered": NOW, "in_hand": 0,
         "cpu": -1.0, "rss": 0},
    ]  # fmt: skip
    st.live_engines(rows)
    states = {
        e["id"]: (e["state"], e["in_hand"], e["cpu"], e["done"]) for e in st.view(NOW)["engines"]
    }
    assert states == {0: ("busy", 3, 97.0, 5), 1: ("idle", 0, None, 0)}
    st.apply([(FEED_UNREGISTERED, a, "stopped heartbeating")], NOW)
    st.apply([(FEED_UNREGISTERED, b, "restarted")], NOW)
    view = st.view(NOW)
    assert {e["id"]: e["state"] for e in view["engines"]} == {0: "dead", 1: "replaced"}
    assert view["engine_count"] == 0
    # engine 1 comes back under its id: a new row, alive
    st.apply([(FEED_REGISTERED, engine(1, "ub2"))], NOW)
    assert {e["id"]: e["state"] for e in st.view(NOW)["engines"]} == {0: "dead", 1: "idle"}


def test_progress_of_a_client_restarts_with_each_burst_and_series_count_per_second():
    a = engine(0, "ua")
    first = [task(f"a{i}", "ua", t=NOW + 0.1 * i) for i in range(4)]
    st = fed((FEED_REGISTERED, a), *[(FEED_SUBMITTED, r.client) for r in first])
    st.apply([finished_event(r) for r in first[:3]], NOW + 0.5)
    c = st.view(NOW + 2)["clients"][0]
    assert (c["finished"], c["submitted"], c["pending"]) == (3, 4, 1)
    st.apply([finished_event(first[3])], NOW + 0.9)
    second = [task(f"b{i}", "ua", t=NOW + 1.5) for i in range(2)]
    st.apply([(FEED_SUBMITTED, r.client) for r in second], NOW + 1.2)
    c = st.view(NOW + 2)["clients"][0]
    assert (c["finished"], c["submitted"], c["pending"], c["total"]) == (0, 2, 2, 6)
    series = st.view(NOW + 3)["series"]
    assert series["t"][0] == int(NOW)
    assert series["rate"][0] == 4  # four ended in the first second
    assert series["latency_ms"][0] == 500.0


def test_a_burst_is_counted_whole_and_its_newest_tasks_drawn():
    a = engine(0, "ua")
    many = [task(f"m{i}", "ua", t=NOW) for i in range(3 * MAX_BARS)]
    bad = task("bad", "ua", status="error", t=NOW)
    events = [(FEED_SUBMITTED, r.client) for r in [bad, *many]]
    events += [finished_event(r) for r in [bad, *many]]
    st = fed((FEED_REGISTERED, a), *events)
    view = st.view(NOW + 2)
    assert view["series"]["rate"][0] == 3 * MAX_BARS + 1
    assert view["clients"][0]["finished"] == 3 * MAX_BARS + 1
    assert len(view["bars"]) == MAX_BARS
    assert view["bars"][-1][6] == f"m{3 * MAX_BARS - 1}"  # the newest
    assert st.search({"status": "error"})[0]["msg_id"] == "bad"  # a failure is never skipped


def test_old_bars_leave_the_window():
    a = engine(0, "ua")
    old, new = task("old", "ua", t=NOW - 1000), task("new", "ua", t=NOW)
    st = fed((FEED_REGISTERED, a), finished_event(old), finished_event(new))
    st.trim(NOW)
    assert [b[6] for b in st.view(NOW)["bars"]] == ["new"]
