"""ipyparallel/util.py: the helpers user code imports (utc, interactive, progress...)."""

from __future__ import annotations

import io
import sys
from datetime import UTC, datetime, timedelta

import pytest

import zpar as ipp
from zpar import util


def test_utc_and_utcnow():
    assert util.utc is UTC
    now = util.utcnow()
    assert now.tzinfo is not None and abs(now - datetime.now(UTC)) < timedelta(seconds=5)


def test_compare_datetimes_mixes_naive_and_aware():
    aware = datetime(2024, 1, 1, 12, tzinfo=UTC)
    naive = aware.astimezone().replace(tzinfo=None)  # the same instant, local and naive
    assert util.compare_datetimes(aware, naive) == timedelta(0)
    assert util.ensure_timezone(naive).tzinfo is not None


def test_int_keys_and_dicts():
    assert util.int_keys({"1": "a", "2.5": "b", "x": "c"}) == {1: "a", 2.5: "b", "x": "c"}
    with pytest.raises(KeyError, match="already have key 1"):
        util.int_keys({"1": 0, 1: 0})
    ns = util.Namespace(a=1)
    ns.b = 2
    assert (ns.a, ns["b"]) == (1, 2)
    with pytest.raises(NameError):
        ns.c  # noqa: B018
    rd = util.ReverseDict({"a": 1})
    rd["b"] = 2
    assert (rd["a"], rd[1], rd[2], rd.get(3, "none")) == (1, "a", "b", "none")


def test_urls():
    assert util.is_url("tcp://127.0.0.1:5555") and not util.is_url("127.0.0.1")
    assert util.validate_url("tcp://127.0.0.1:5555")
    with pytest.raises(ValueError, match="port"):
        util.validate_url("tcp://127.0.0.1:abc")
    assert util.split_url("tcp://127.0.0.1:5555") == ("tcp", "127.0.0.1", "5555")
    assert util.is_ip("127.0.0.1") and util.is_ip("::1") and not util.is_ip("localhost")


def test_interactive_marks_the_function_as_main():
    @ipp.interactive
    def f(x):
        return x + 1

    assert f.__module__ == "__main__" and f(1) == 2
    assert f.__globals__ is sys.modules["__main__"].__dict__


def test_interactive_function_sees_names_pushed_to_the_engine(rc):
    @ipp.interactive
    def scaled(x):
        return x * factor  # noqa: F821 - pushed to the engines below

    dv = rc[:]
    dv.push({"factor": 3}, block=True)
    assert dv.apply_sync(scaled, 2) == [6, 6]


def test_progress_without_widgets_is_a_text_bar():
    out = io.StringIO()
    bar = util.progress(total=3, widget=False, file=out, desc="work")
    bar.update(3)
    bar.close()
    assert "work" in out.getvalue() and "3/3" in out.getvalue()


def test_progress_in_a_kernel_without_ipywidgets_falls_back_to_text(monkeypatch, caplog):
    class FakeKernelShell:
        kernel = object()

    class FakeIPython:
        @staticmethod
        def get_ipython():
            return FakeKernelShell()

    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # not importable
    out = io.StringIO()
    monkeypatch.setattr(util, "_said_no_widgets", False)
    with caplog.at_level("INFO", logger="zpar.client"):
        bar = util.progress(total=2, file=out)  # tqdm.auto would warn (an error here)
    bar.update(2)
    bar.close()
    assert "2/2" in out.getvalue()
    assert "ipywidgets is not installed" in caplog.text  # says so, once
