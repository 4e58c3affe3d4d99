"""The scheduler's dependency bookkeeping, in memory: every after/follow rule."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from zpar.dependency import Dependency, msg_ids_of, to_wire
from zpar.schedulers.flags import parse_gates, parse_outcomes, parse_retries, parse_timeout
from zpar.schedulers.graph import DependencyGraph, Gate

OK_A, OK_B, FAIL_A = (True, b"A"), (True, b"B"), (False, b"A")


@dataclass(eq=False)
class T:
    msg_id: str
    gates: list = field(default_factory=list)


def task(name, after=None, follow=None):
    gates = []
    if after is not None:
        gates.append(Gate.of(after, follow=False))
    if follow is not None:
        gates.append(Gate.of(follow, follow=True))
    return T(name, gates)


# (dependency kwargs, outcomes of a and b in order, expected verdict: None wait, "" met, "!" impossible)
MATRIX = [
    ({"all": True}, [OK_A, OK_B], ""),
    ({"all": True}, [OK_A], None),
    ({"all": True}, [FAIL_A], "!"),
    ({"all": False}, [FAIL_A], None),
    ({"all": False}, [FAIL_A, OK_B], ""),
    ({"all": False}, [OK_A], ""),
    ({"all": False}, [FAIL_A, (False, b"B")], "!"),
    ({"all": True, "success": False, "failure": True}, [FAIL_A, (False, b"B")], ""),
    ({"all": True, "success": False, "failure": True}, [OK_A], "!"),
    ({"all": True, "success": True, "failure": True}, [FAIL_A, OK_B], ""),
    ({"all": False, "success": False, "failure": True}, [OK_A, FAIL_A], ""),
]


@pytest.mark.parametrize(("kw", "outcomes", "expected"), MATRIX)
def test_after_matrix(kw, outcomes, expected):
    g = DependencyGraph()
    t = task("t", after=Dependency(["a", "b"], **kw))
    assert g.add(t, {}) is None  # nothing known yet: waits
    settled = []
    for name, outcome in zip("ab", outcomes, strict=False):
        settled += g.finished(name, outcome)
    if expected is None:
        assert settled == [] and "t" in g.waiting
    else:
        assert len(settled) == 1 and settled[0][0] is t
        verdict = settled[0][1]
        assert (verdict == "") if expected == "" else bool(verdict)
        assert "t" not in g.waiting and not g.dependents


def test_follow_all_needs_one_engine():
    g = DependencyGraph()
    t = task("t", follow=Dependency(["a", "b"]))
    g.add(t, {})
    g.finished("a", OK_A)
    [(_, verdict)] = g.finished("b", OK_B)
    assert "different engines" in verdict
    t2 = task("t2", follow=Dependency(["a", "c"]))
    assert g.add(t2, {"c": OK_A}) == ""
    assert t2.gates[0].engines == {b"A"}


def test_follow_any_keeps_the_engines_of_met_ones():
    g = DependencyGraph()
    t = task("t", follow=Dependency(["a", "b"], all=False))
    g.add(t, {})
    [(_, verdict)] = g.finished("b", OK_B)
    assert verdict == "" and t.gates[0].engines == {b"B"}
    assert not g.dependents  # the unfinished "a" no longer indexes it


def test_follow_of_a_task_that_never_ran_is_impossible():
    g = DependencyGraph()
    t = task("t", follow=Dependency(["a"], success=True, failure=True))
    assert g.add(t, {"a": (False, b"")})


def test_known_outcomes_settle_at_once_and_the_window_remembers():
    g = DependencyGraph(window=3)
    for i in range(5):
        g.finished(f"m{i}", OK_A)
    assert [m in g.done for m in ("m0", "m1", "m2", "m3", "m4")] == [False, False, True, True, True]
    assert len(g.done) == 3 and g.done.get("m4") == OK_A and g.done.get("m0") is None
    assert g.add(task("x", after=Dependency(["m4"])), {}) == ""
    assert g.add(task("y", after=Dependency(["m0"])), {}) is None  # forgotten: waits
    assert g.add(task("z", after=Dependency(["m0"])), {"m0": FAIL_A})  # the client knew


def test_after_and_follow_together():
    g = DependencyGraph()
    t = task("t", after=Dependency(["a"]), follow=Dependency(["b"]))
    g.add(t, {})
    assert g.finished("b", OK_B) == []
    [(_, verdict)] = g.finished("a", OK_A)
    assert verdict == ""


def test_a_chain_is_linear():
    g = DependencyGraph()
    n = 20_000
    for i in range(1, n):
        assert g.add(task(f"t{i}", after=Dependency([f"t{i - 1}"])), {}) is None
    released = 0
    for i in range(n - 1):
        settled = g.finished(f"t{i}", OK_A)
        assert [t.msg_id for t, v in settled] == [f"t{i + 1}"]
        released += 1
    assert released == n - 1 and not g.waiting and not g.dependents


def test_remove_unindexes():
    g = DependencyGraph()
    t = task("t", after=Dependency(["a", "b"]))
    g.add(t, {})
    assert g.remove(t) and not g.remove(t)
    assert not g.dependents and g.finished("a", OK_A) == []


def test_dependency_validation_and_wire_form():
    with pytest.raises(ValueError, match="success, failure"):
        Dependency(["a"], success=False, failure=False)
    with pytest.raises(TypeError, match="msg_ids"):
        msg_ids_of(42)
    assert to_wire(None) is None and to_wire([]) is None
    assert to_wire("a") == {"ids": ["a"], "all": True, "success": True, "failure": False}
    d = Dependency.from_wire({"ids": ["b", "a"], "all": False})
    assert set(d) == {"a", "b"} and not d.all
    with pytest.raises(ValueError, match="msg_id strings"):
        Dependency.from_wire({"ids": [1]})


def test_flag_parsing_errors_name_the_flag():
    with pytest.raises(ValueError, match="after"):
        parse_gates({"after": "nope"})
    with pytest.raises(ValueError, match="retries"):
        parse_retries({"retries": -1})
    with pytest.raises(ValueError, match="timeout"):
        parse_timeout({"timeout": float("nan")})
    with pytest.raises(ValueError, match="outcome"):
        parse_outcomes({"outcomes": {"a": [True]}})
    assert parse_outcomes({"outcomes": {"a": [True, "u"]}}) == {"a": (True, b"u")}
    assert parse_timeout({}) is None and parse_retries({}) == 0
