"""Typed batched calls end to end: client, MUX relay / task scheduler, engines."""

from __future__ import annotations

import numpy as np
import pytest

import zpar
from tests.typed.every_type import every_type_args
from zpar.typed import function_id_for
from zpar.typed.result import RemoteCallError

pytestmark = pytest.mark.timeout(120)

XYZ = [("x", "float64"), ("y", "float64"), ("z", "float64")]

ECHO_ARGS = every_type_args("int64")


def echo(i32, i64, f32, f64, b, s, io):
    return s, io + 1, i32, i64, f32, f64, b


def fxyz(x, y, z):
    return x + y * z


def fails_at_7(x, y, z):
    if x == 7:
        raise ZeroDivisionError("x is 7")
    return x


S = ["", "é", "日本語", "plain", "x" * 300]


def check_echo(res, n):
    s, io, i32, i64, f32, f64, b = res
    assert s.tolist() == (S * n)[:n]
    assert io.tolist() == [2**40 + 1] * n and io.dtype == np.int64
    assert i32.tolist() == [i - n // 2 for i in range(n)] and i32.dtype == np.int32
    assert i64.tolist() == [2**40] * n
    assert f32.dtype == np.float32 and f32.tolist() == [0.5] * n
    assert f64.tolist() == [i / 4 for i in range(n)]
    assert b.dtype == np.bool_ and b.tolist() == [i % 3 == 0 for i in range(n)]


def echo_args(n):
    return (
        (np.arange(n) - n // 2).astype(np.int32),
        2**40,
        np.float32(0.5),
        np.arange(n) / 4,
        np.arange(n) % 3 == 0,
        (S * n)[:n],
    )


@pytest.mark.parametrize("vectorized", [False, True])
def test_echo_of_every_type_on_a_direct_view_split_over_engines(rc, vectorized):
    dv = rc[:]
    dv.typed.register(echo, args=ECHO_ARGS, returns="string", vectorized=vectorized)
    check_echo(dv.typed.echo(*echo_args(11), io=2**40), 11)
    ar = dv.typed.echo(*echo_args(11), io=2**40, block=False)
    assert len(ar.msg_ids) == 2  # one contiguous range per engine
    check_echo(ar.get(), 11)


def test_echo_through_the_task_scheduler(rc):
    rc[:].typed.register(echo, args=ECHO_ARGS, returns="string")
    lv = rc.load_balanced_view()
    check_echo(lv.typed.echo(*echo_args(40), io=2**40), 40)


def test_defaults_and_inout(rc):
    def scale(x, k, n):
        return x * k, n * 10

    dv = rc[:]
    dv.typed.register(
        scale,
        args=[("x", "float64"), ("k", "float64"), ("n", "int32", "inout")],
        returns="float64",
        defaults={"k": 2.0},
    )
    r, n = dv.typed.scale([1.0, 2.0, 3.0], n=[1, 2, 3])
    assert r.tolist() == [2.0, 4.0, 6.0] and n.tolist() == [10, 20, 30]
    r, n = dv.typed.call("scale", 1.0, 5.0, 7)  # scalars only: one call
    assert r.tolist() == [5.0] and n.tolist() == [70]


@pytest.mark.parametrize("ncalls, messages", [(100, 10), (101, 11)])
def test_split_at_max_calls_per_message(rc, ncalls, messages):
    e0 = rc[0]
    e0.typed.register(fxyz, args=XYZ, returns="float64", vectorized=True)
    x = np.arange(float(ncalls))
    ar = e0.typed.fxyz(x, 1.0, x, max_calls_per_message=10, block=False)
    assert len(ar.msg_ids) == messages
    np.testing.assert_array_equal(ar.get(), x + x)
    e0.typed.max_calls_per_message = 10  # the attribute, for every call
    assert len(e0.typed.fxyz(x, 1.0, x, block=False).msg_ids) == messages
    # two engines: 51 + 50 calls (101) or 50 + 50 (100), each split at 10
    dv = rc[:]
    dv.typed.register(fxyz, args=XYZ, returns="float64", vectorized=True)
    ar = dv.typed.fxyz(x, 1.0, x, max_calls_per_message=10, block=False)
    assert len(ar.msg_ids) == (10 if ncalls == 100 else 11)
    np.testing.assert_array_equal(ar.get(), x + x)
    # load balanced: ~8 chunks per engine (7 calls each here), max_calls_per_message below
    lv = rc.load_balanced_view()
    ar = lv.typed.fxyz(x, 1.0, x, max_calls_per_message=10, block=False)
    assert len(ar.msg_ids) == -(-ncalls // 7)
    np.testing.assert_array_equal(ar.get(), x + x)
    ar = lv.typed.fxyz(x, 1.0, x, max_calls_per_message=5, block=False)
    assert len(ar.msg_ids) == -(-ncalls // 5)
    np.testing.assert_array_equal(ar.get(), x + x)


def test_raw_function_id_and_a_function_registered_by_the_engine_itself(rc):
    dv = rc[:]
    dv.execute(
        "import zpar\n"
        "@zpar.typed_function(args=[('x', 'float64')], returns='float64', name='typed_e2e_decorated')\n"
        "def tripled(x):\n"
        "    return 3 * x\n",
        block=True,
    )
    assert dv.typed.typed_e2e_decorated([1.0, 2.0]).tolist() == [3.0, 6.0]
    fid = function_id_for("typed_e2e_decorated")
    assert dv.typed.call(fid, [4.0]).tolist() == [12.0]


def test_exception_reports_the_call_index_and_the_engine_keeps_serving(rc):
    dv = rc[:]
    dv.typed.register(fails_at_7, args=XYZ, returns="float64")
    with pytest.raises(RemoteCallError) as info:
        dv.typed.fails_at_7(np.arange(20.0), 0.0, 0.0, max_calls_per_message=5)
    assert info.value.call_index == 7 and info.value.ename == "ZeroDivisionError"
    assert isinstance(info.value, zpar.RemoteError)
    assert dv.typed.fails_at_7([1.0, 2.0], 0.0, 0.0).tolist() == [1.0, 2.0]


def test_unknown_function_id_is_an_error_and_the_engine_keeps_serving(rc):
    rc[0].typed.register(fxyz, args=XYZ, returns="float64", name="only_on_engine_0")
    with pytest.raises(RemoteCallError) as info:
        rc[1].typed.only_on_engine_0([1.0], 1.0, 1.0)  # the client knows it; engine 1 does not
    assert info.value.ename == "UnknownFunction"
    assert str(function_id_for("only_on_engine_0")) in info.value.evalue
    assert rc[1].apply_sync(lambda: 41 + 1) == 42
    assert rc[0].typed.only_on_engine_0([1.0], 1.0, 1.0).tolist() == [2.0]


def test_bad_columns_fail_before_anything_is_sent(rc, monkeypatch):
    dv = rc[:]
    dv.typed.register(fxyz, args=XYZ, returns="float64")
    sent = []
    real_send = rc.sender.send
    monkeypatch.setattr(rc.sender, "send", lambda *a, **k: sent.append(a) or real_send(*a, **k))
    with pytest.raises(TypeError, match="argument 'y' is float64"):
        dv.typed.fxyz([1.0], ["a"], 1.0)
    with pytest.raises(ValueError, match="argument 'x' has 2 values but 'z' has 3"):
        dv.typed.fxyz([1.0, 2.0], 1.0, [1.0, 2.0, 3.0])
    assert dv.typed.fxyz([], 1.0, 1.0).dtype == np.float64  # no calls: nothing to send
    assert sent == []
    with pytest.raises(AttributeError, match="no typed function 'nope'"):
        dv.typed.nope(1.0)


def test_register_as_a_decorator(rc):
    dv = rc[:]

    @dv.typed.register(args=[("s", "string"), ("n", "int32")], returns="string")
    def repeat(s, n):
        return s * n

    assert repeat(["ab", "é"], 2).tolist() == ["abab", "éé"]
    assert repeat.signature.function_id == function_id_for("repeat")


def test_id_clash_at_registration(rc):
    dv = rc[:]
    dv.typed.register(fxyz, args=XYZ, returns="float64", name="first", function_id=777)
    with pytest.raises(ValueError, match="already 'first'"):
        dv.typed.register(fails_at_7, args=XYZ, returns="float64", name="second", function_id=777)


def test_a_typed_result_read_back_from_the_hub_is_its_type_arrays(rc):
    e0 = rc[0]
    e0.typed.register(fxyz, args=XYZ, returns="float64", vectorized=True)
    ar = e0.typed.fxyz([1.0, 2.0], 1.0, 1.0, block=False)
    ar.get()
    stored = rc.get_result(ar.msg_ids[0]).get(timeout=30)
    assert set(stored) == {"float64"} and stored["float64"].tolist() == [2.0, 3.0]


def test_blocking_call_to_one_engine_goes_by_the_calling_thread(rc, monkeypatch):
    sent = []
    real_call = rc._direct_caller.call
    monkeypatch.setattr(
        rc._direct_caller, "call", lambda *a, **k: sent.append(a[0]) or real_call(*a, **k)
    )
    e0 = rc[0]
    e0.typed.register(fails_at_7, args=XYZ, returns="float64")
    del sent[:]  # the registration (an apply) went this way too
    assert e0.typed.fails_at_7([1.0, 2.0], 0.0, 0.0).tolist() == [1.0, 2.0]
    with pytest.raises(RemoteCallError) as info:
        e0.typed.fails_at_7([6.0, 7.0], 0.0, 0.0)
    assert info.value.call_index == 1
    assert len(sent) == 2
    assert e0.typed.fails_at_7([1.0, 2.0], 0.0, 0.0, max_calls_per_message=1).tolist() == [1.0, 2.0]
    assert len(sent) == 2  # two messages: through the I/O thread


def dies_at_3(x, y, z):
    if x == 3:
        import os

        os._exit(1)
    return x


def test_an_engine_dying_in_a_typed_call_is_an_engine_error(make_cluster):
    rc = make_cluster(n=2).client
    rc.wait_for_engines(2, timeout=30)
    rc[:].typed.register(dies_at_3, args=XYZ, returns="float64")
    lv = rc.load_balanced_view()
    with pytest.raises(zpar.EngineError):
        lv.typed.dies_at_3([3.0], 0.0, 0.0)
    assert lv.typed.dies_at_3([1.0], 0.0, 0.0).tolist() == [1.0]  # the other engine serves
