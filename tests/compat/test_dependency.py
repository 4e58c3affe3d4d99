"""ipyparallel/controller/dependency.py: Dependency, @depend, @require, dependent."""

from __future__ import annotations

import os

import pytest

import zpar as ipp


def test_dependency_from_msg_ids_async_results_and_dicts(rc):
    ar = rc[0].apply_async(abs, -1)
    ar.get(timeout=30)
    d = ipp.Dependency([ar, "x"], all=False, failure=True)
    assert set(d) == {ar.msg_ids[0], "x"} and not d.all and d.failure
    as_dict = d.as_dict()
    assert set(as_dict) == {"dependencies", "all", "success", "failure"}
    again = ipp.Dependency(as_dict)
    assert again == d and (again.all, again.success, again.failure) == (False, True, True)
    with pytest.raises(ValueError, match="success, failure"):
        ipp.Dependency(["a"], success=False, failure=False)
    with pytest.raises(TypeError):
        ipp.Dependency([1.5])


def test_dependency_check_and_unreachable():
    d = ipp.Dependency(["a", "b"])
    assert not d.check({"a"}) and d.check({"a", "b"})
    assert d.unreachable(set(), {"a"})
    anyof = ipp.Dependency(["a", "b"], all=False)
    assert anyof.check({"b"}) and not anyof.unreachable(set(), {"a"})
    assert anyof.unreachable(set(), {"a", "b"})
    assert ipp.Dependency([]).check(set())


def test_after_follow_flags_take_dependencies(rc):
    lv = rc.load_balanced_view()
    first = lv.apply_async(os.getpid)
    pid = first.get(timeout=30)
    with lv.temp_flags(follow=ipp.Dependency(first)):
        assert lv.apply_sync(os.getpid) == pid


def test_depend_runs_only_where_the_predicate_is_not_false(rc):
    target = rc[-1].apply_sync(os.getpid)

    def on(pid):
        import os

        return os.getpid() == pid

    @ipp.depend(on, target)
    def where():
        import os

        return os.getpid()

    assert isinstance(where, ipp.dependent)
    lv = rc.load_balanced_view()
    assert {lv.apply_sync(where) for _ in range(6)} == {target}


def test_depend_predicate_returning_none_counts_as_met(rc):
    def shrug():
        return None

    @ipp.depend(shrug)
    def f():
        return 1

    assert rc.load_balanced_view().apply_sync(f) == 1


def test_require_modules_by_name_and_object(rc):
    import json

    @ipp.require("math", json)
    def both():
        return math.floor(json.loads("2.5"))  # noqa: F821 - math imported by require

    assert rc.load_balanced_view().apply_sync(both) == 2


def test_require_pushes_functions_and_keyword_objects(rc):
    def helper(x):
        return x * 10

    @ipp.require(helper, limit=3)
    def uses(x):
        return min(helper(x), limit)  # noqa: F821 - bound by require

    assert rc.load_balanced_view().apply_sync(uses, 1) == 3
    assert rc[0].apply_sync(uses, 0) == 0
    with pytest.raises(TypeError, match="by kwarg"):
        ipp.require(5)


def test_require_a_missing_module_is_impossible(rc):
    @ipp.require("zpar_compat_no_such_module")
    def needs():
        return 1

    with pytest.raises(ipp.ImpossibleDependency):
        rc.load_balanced_view().apply_sync(needs)


def test_importable_from_ipyparallels_module_path():
    from zpar.controller.dependency import Dependency, depend, dependent, require

    assert (Dependency, depend, dependent, require) == (
        ipp.Dependency,
        ipp.depend,
        ipp.dependent,
        ipp.require,
    )


def test_a_dependency_on_an_unknown_msg_id_is_invalid(rc):
    lv = rc.load_balanced_view()
    with lv.temp_flags(after="12345"):
        with pytest.raises(ipp.InvalidDependency, match="12345"):
            lv.apply_sync(lambda: 1)  # ipyparallel raises it from the task; zpar at once
    other = rc[0].apply_async(lambda: 2)
    other.get(timeout=30)
    with lv.temp_flags(after=[other.msg_ids[0]]):
        assert lv.apply_sync(lambda: 3) == 3
