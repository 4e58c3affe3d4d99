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


def test_address_helpers_of_ipyparallel_util():
    """ipyparallel.util's disambiguate_url & co (issue 24: the n/a rows reopened)."""
    import socket

    from zpar import util

    assert util.disambiguate_url("tcp://*:5555") == "tcp://127.0.0.1:5555"
    assert util.disambiguate_url("tcp://0.0.0.0:5555", socket.gethostname()) == (
        "tcp://127.0.0.1:5555"
    )
    assert util.disambiguate_url("tcp://0.0.0.0:1", "127.0.0.1") == "tcp://127.0.0.1:1"
    assert util.disambiguate_url("tcp://0.0.0.0:1", "192.0.2.7") == "tcp://192.0.2.7:1"
    assert util.disambiguate_url("tcp://10.1.2.3:1", "192.0.2.7") == "tcp://10.1.2.3:1"
    assert util.disambiguate_url("ipc:///tmp/x") == "ipc:///tmp/x"
    assert util.disambiguate_ip_address("*") == "127.0.0.1"
    ports = util.select_random_ports(3)
    assert len(set(ports)) == 3 and all(p > 0 for p in ports)
    assert util.integer_loglevel("DEBUG") == util.integer_loglevel("10") == 10
    assert util.validate_url_container({"a": ["tcp://127.0.0.1:1", "ipc:///x"]})
    with pytest.raises(ValueError):
        util.validate_url_container(["tcp://nope"])
    assert util.ip_for_host("localhost").startswith("127.")
