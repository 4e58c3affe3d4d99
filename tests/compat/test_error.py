"""ipyparallel/error.py: the error tree, RemoteError / CompositeError rendering, helpers."""

from __future__ import annotations

import builtins
import pickle

import pytest

import zpar as ipp
from zpar import error


def remote_error(i, ename="ValueError"):
    return ipp.RemoteError(
        ename,
        f"bad {i}",
        f"Traceback (most recent call last):\n  line {i}\n{ename}: bad {i}",
        {"engine_id": i, "method": "apply"},
    )


def test_hierarchy_as_ipyparallel():
    for cls in (
        error.EngineError,
        error.NoEnginesRegistered,
        error.TaskAborted,
        error.TaskTimeout,
        error.UnmetDependency,
        error.RemoteError,
    ):
        assert issubclass(cls, error.KernelError) and issubclass(cls, error.IPythonError)
    assert issubclass(error.ImpossibleDependency, error.UnmetDependency)
    assert issubclass(error.DependencyTimeout, error.ImpossibleDependency)
    assert issubclass(error.InvalidDependency, error.ImpossibleDependency)
    assert issubclass(error.CompositeError, error.RemoteError)
    assert issubclass(error.AlreadyDisplayedError, error.RemoteError)
    assert error.TimeoutError is builtins.TimeoutError
    assert issubclass(ipp.TimeoutError, builtins.TimeoutError)  # zpar's is caught by it


def test_remote_error_render_traceback():
    e = remote_error(3)
    lines = e.render_traceback()
    assert lines[0] == "[3:apply]"
    assert lines[-1] == "ValueError: bad 3"
    assert e._render_traceback_() == lines  # what IPython shows instead of the local one
    assert repr(e) == "<RemoteError[3]:ValueError(bad 3)>"
    assert ipp.RemoteError("E", "v", "", {}).render_traceback() == [
        "[Engine Exception]",
        "No traceback available",
    ]


def test_composite_error_tb_limit_and_truncation():
    errs = [remote_error(i) for i in range(6)]
    ce = ipp.CompositeError("one or more exceptions raised in: f", errs)
    text = str(ce)
    assert text.startswith("one or more exceptions raised in: f")
    assert ce.tb_limit == 4
    assert "[3:apply] ValueError: bad 3" in text and "[4:apply]" not in text
    assert ".... 2 more exceptions ..." in text
    lines = ce.render_traceback()
    assert lines.count("") == 4 and lines[-1] == "... 2 more exceptions ..."
    assert ce.render_traceback(5)[0] == "[5:apply]:"
    with pytest.raises(IndexError, match="index 9"):
        ce.render_traceback(9)
    assert [en for en, ev, etb, ei in ce.elist] == ["ValueError"] * 6
    assert repr(ce) == "CompositeError(6)"


def test_composite_error_tb_limit_is_a_class_attribute_users_change():
    errs = [remote_error(i) for i in range(3)]
    ce = ipp.CompositeError("m", errs)
    try:
        ipp.CompositeError.tb_limit = 1
        assert ".... 2 more exceptions ..." in str(ce)
    finally:
        ipp.CompositeError.tb_limit = 4
    assert "more exceptions" not in str(ce)


def test_composite_raise_exception():
    ce = ipp.CompositeError("m", [remote_error(0), remote_error(1, "KeyError")])
    with pytest.raises(ipp.RemoteError) as info:
        ce.raise_exception(1)
    assert info.value.ename == "KeyError"
    with pytest.raises(IndexError):
        ce.raise_exception(7)


def test_errors_pickle():
    ce = ipp.CompositeError("m", [remote_error(0)])
    back = pickle.loads(pickle.dumps(ce))
    assert str(back) == str(ce)
    e = pickle.loads(pickle.dumps(remote_error(2)))
    assert e.engine_info["engine_id"] == 2


def test_collect_exceptions_raises_a_flattened_composite():
    ok = [1, 2]
    assert error.collect_exceptions(ok, "f") is ok
    inner = ipp.CompositeError("m", [remote_error(0), remote_error(1)])
    with pytest.raises(ipp.CompositeError) as info:
        error.collect_exceptions({0: inner, 1: remote_error(2), 2: 5}, "f")
    assert len(info.value.elist) == 3
    assert str(info.value).startswith("one or more exceptions raised in: f")


def test_wrap_and_unwrap_exception():
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        content = error.wrap_exception({"engine_id": 1, "method": "execute"})
    assert content["status"] == "error" and content["ename"] == "ZeroDivisionError"
    err = error.unwrap_exception(content)
    assert isinstance(err, ipp.RemoteError) and "ZeroDivisionError" in err.traceback
    assert err.render_traceback()[0] == "[1:execute]"


def test_already_displayed_error_renders_one_line():
    ce = ipp.CompositeError("m", [remote_error(0), remote_error(1)])
    e = ipp.AlreadyDisplayedError(ce)
    assert e.render_traceback() == ["2 errors"] and str(e) == "2 errors"


def test_no_engines_registered_is_raised_for_an_empty_selection(rc):
    with pytest.raises(ipp.NoEnginesRegistered):
        rc[5:]


def test_remote_errors_from_engines_render_like_ipyparallel(rc):
    def fail(x):
        raise ValueError(f"no {x}")

    with pytest.raises(ipp.CompositeError) as info:
        rc[:].apply_sync(fail, 1)
    ce = info.value
    assert sorted(ei["engine_id"] for _, _, _, ei in ce.elist) == [0, 1]
    assert any("ValueError: no 1" in line for line in ce.render_traceback())
    with pytest.raises(ipp.RemoteError) as one:
        rc[-1].apply_sync(fail, 2)
    assert one.value.render_traceback()[0].startswith("[1:")
