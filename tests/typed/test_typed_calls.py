"""Signatures, the registry, the client's column checks and the engine's handler, in memory."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import zpar
from tests.typed.every_type import every_type_args
from zpar import namespace
from zpar.engine.kernel import Kernel
from zpar.errors import RemoteProtocolError
from zpar.typed.client import columns_of, request_arrays
from zpar.typed.codec import type_arrays, type_frames
from zpar.typed.engine import serve
from zpar.typed.registry import REGISTRY, RegistrationError, Registry, typed_function
from zpar.typed.result import RemoteCallError, decode_typed_reply, join_chunks
from zpar.typed.signature import TypedSignature, function_id_for, signature_of
from zpar.wire import Message, Session
from zpar.wire.messages import REPLY_TYPE, TASK_REQUESTS, MsgType, ReplyStatus

pytestmark = pytest.mark.timeout(30)

XYZ = [("x", "float64"), ("y", "float64"), ("z", "float64")]


def test_default_id_is_amuses_abs_signed_crc32():
    # AMUSE checks its crc32 with crc32("amuse") & 0xffffffff == 0xc0cc9367 (signed:
    # negative), and takes abs() of the signed value
    assert function_id_for("amuse") == 2**32 - 0xC0CC9367
    assert signature_of(lambda: 0, name="amuse").function_id == function_id_for("amuse")
    assert TypedSignature.build("f", function_id=17).function_id == 17  # an explicit id wins


def test_placement_result_first_then_out_and_inout_in_declaration_order():
    sig = TypedSignature.build(
        "f",
        [
            ("a", "int32"),
            ("b", "float64", "out"),
            ("c", "int32", "inout"),
            ("d", "float64", "inout"),
        ],
        returns="float64",
    )
    assert [(p.name, p.input_index) for p in sig.inputs] == [("a", 0), ("c", 1), ("d", 0)]
    assert [(p.name, p.type, p.output_index) for p in sig.outputs] == [
        ("__result", "float64", 0),
        ("b", "float64", 1),
        ("c", "int32", 0),
        ("d", "float64", 2),
    ]
    assert sig.in_counts == (2, 0, 0, 1, 0, 0)
    assert sig.out_counts == (1, 0, 0, 3, 0, 0)
    assert TypedSignature.from_dict(sig.to_dict()) == sig


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"args": [("x", "double")]}, "type 'double'"),
        ({"args": [("x", "float64", "both")]}, "direction 'both'"),
        ({"args": [("x", "float64"), ("x", "int32")]}, "declared twice"),
        ({"args": [("block", "int32")]}, "keyword of every typed call"),
        ({"args": [("x", "float64", "out")], "defaults": {"x": 1.0}}, "cannot have a default"),
        ({"defaults": {"q": 1}}, "unknown parameter 'q'"),
        ({"returns": "complex"}, "returns must be"),
        ({"function_id": 0}, "0 stops a worker"),
        ({"function_id": 2**31}, "int32"),
    ],
)
def test_bad_declarations_name_what_is_wrong(kw, match):
    with pytest.raises(ValueError, match=match):
        TypedSignature.build("f", **kw)


def test_registry_id_clash_is_an_error_and_a_name_can_be_replaced():
    reg = Registry()
    reg.add(TypedSignature.build("f", function_id=5), lambda: 1)
    with pytest.raises(RegistrationError, match="already 'f'"):
        reg.add(TypedSignature.build("g", function_id=5), lambda: 2)
    reg.add(TypedSignature.build("f", function_id=6), lambda: 3)  # re-registered, new id
    assert reg.get(5) is None and reg.lookup("f").function_id == 6


def test_decorator_registers_in_the_process_registry():
    @zpar.typed_function(args=[("n", "int32")], returns="int32", name="typed_test_decorated")
    def inc(n):
        return n + 1

    try:
        assert inc(1) == 2  # unchanged
        assert REGISTRY.lookup("typed_test_decorated") is inc.__typed__
    finally:
        REGISTRY.remove("typed_test_decorated")


# -- client-side checks, before anything is sent ------------------------------------------


def sig_xyz(**kw):
    return TypedSignature.build("f", XYZ, returns="float64", **kw)


def test_scalars_broadcast_and_ncalls_is_the_longest_column():
    n, cols = columns_of(sig_xyz(), (np.arange(4.0), 2.0), {"z": [1, 2, 3, 4]})
    assert n == 4
    arrays = request_arrays(sig_xyz(), cols, 1, 3)
    assert arrays["float64"].tolist() == [1.0, 2.0, 2.0, 2.0, 2.0, 3.0]


def test_defaults_fill_missing_arguments():
    sig = TypedSignature.build("f", XYZ, defaults={"z": 0.5})
    n, cols = columns_of(sig, (1.0, [1.0, 2.0]), {})
    assert n == 2 and float(cols[2]) == 0.5


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((1.0, 2.0), {}, TypeError, "missing argument 'z'"),
        (
            (np.arange(3.0), np.arange(4.0), 1.0),
            {},
            ValueError,
            "argument 'x' has 3 values but 'y' has 4",
        ),
        ((["a"], 1.0, 1.0), {}, TypeError, "argument 'x' is float64, got a column of dtype"),
        (
            (np.ones((2, 2)), 1.0, 1.0),
            {},
            ValueError,
            "argument 'x' must be a scalar or a 1-d column",
        ),
        ((1.0, 1.0, 1.0, 1.0), {}, TypeError, "takes 3 input column"),
        ((1.0, 1.0), {"q": 1.0}, TypeError, "no parameter 'q'"),
        ((1.0, 1.0, 1.0), {"x": 1.0}, TypeError, "'x' twice"),
    ],
)
def test_wrong_columns_raise_naming_the_argument(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        columns_of(sig_xyz(), args, kwargs)


def test_int32_range_string_and_bool_columns_are_checked():
    sig = TypedSignature.build("g", [("n", "int32"), ("s", "string"), ("b", "bool")])
    with pytest.raises(ValueError, match="argument 'n' has values .* outside int32"):
        columns_of(sig, ([2**31], "a", True), {})
    with pytest.raises(TypeError, match="argument 's' \\(string\\) holds int"):
        columns_of(sig, (1, ["a", 3], True), {})
    with pytest.raises(TypeError, match="argument 'b' is bool"):
        columns_of(sig, (1, "a", [1.5]), {})
    with pytest.raises(TypeError, match="argument 'n' is int32"):
        columns_of(sig, (1.5, "a", True), {})
    sig_out = TypedSignature.build("h", [("n", "int32", "out")])
    with pytest.raises(TypeError, match="'n' is an out parameter"):
        columns_of(sig_out, (), {"n": 1})


# -- the engine's handler ------------------------------------------------------------------


def request(sig, *args, **kwargs):
    n, cols = columns_of(sig, args, kwargs)
    counts, frames = type_frames(request_arrays(sig, cols, 0, n))
    content = {"call_id": 11, "function_id": sig.function_id, "call_count": n, "counts": counts}
    return content, [bytes(f) for f in frames], n


@pytest.fixture
def registry():
    return Registry()


def echo_all(i32, i64, f32, f64, b, s, io):
    return s, io * 2, i32, i64, f32, f64, b


ECHO_ARGS = every_type_args("int32")


@pytest.mark.parametrize("vectorized", [False, True])
def test_serve_echoes_every_type(registry, vectorized):
    sig = registry.add(
        TypedSignature.build("echo", ECHO_ARGS, returns="string", vectorized=vectorized), echo_all
    )
    s = ["", "é", "日本語", "plain"]
    content, frames, n = request(
        sig,
        [1, -2, 3, 4],
        2**40,
        np.float32(1.5),
        [0.25, 1e300, -0.0, 3.0],
        [True, False, True, False],
        s,
        21,
    )
    reply, out = serve(content, frames, registry)
    assert reply["status"] == ReplyStatus.OK, reply
    assert (reply["call_id"], reply["function_id"], reply["call_count"]) == (11, sig.function_id, 4)
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, reply, [bytes(f) for f in out])
    res = join_chunks(sig, [decode_typed_reply(msg, sig, (11, 0, 4))])
    assert res[0].tolist() == s
    assert res[1].tolist() == [42] * 4  # io * 2 (the inout, in declaration order)
    assert res[2].tolist() == [1, -2, 3, 4] and res[2].dtype == np.int32
    assert res[3].tolist() == [2**40] * 4 and res[3].dtype == np.int64
    assert res[4].dtype == np.float32 and res[4].tolist() == [1.5] * 4
    assert res[5].tolist() == [0.25, 1e300, -0.0, 3.0]
    assert res[6].dtype == np.bool_ and res[6].tolist() == [True, False, True, False]


def test_plain_function_is_called_once_per_call_index(registry):
    seen = []

    def f(x, y, z):
        seen.append((x, y, z))
        return x + y + z

    sig = registry.add(TypedSignature.build("f", XYZ, returns="float64"), f)
    content, frames, n = request(sig, [1.0, 2.0], 10.0, 100.0)
    reply, out = serve(content, frames, registry)
    assert seen == [(1.0, 10.0, 100.0), (2.0, 10.0, 100.0)]
    assert all(type(v) is float for v in seen[0])  # Python scalars, not numpy
    assert type_arrays(reply["counts"], out)["float64"].tolist() == [111.0, 112.0]


def test_vectorized_function_is_called_once_with_columns(registry):
    seen = []

    def f(x, y, z):
        seen.append((type(x), len(x)))
        return x + y + z

    sig = registry.add(TypedSignature.build("f", XYZ, returns="float64", vectorized=True), f)
    content, frames, n = request(sig, np.arange(1000.0), 1.0, 1.0)
    reply, out = serve(content, frames, registry)
    assert seen == [(np.ndarray, 1000)]
    assert type_arrays(reply["counts"], out)["float64"][999] == 1001.0


def test_unknown_function_id_is_an_error_reply_naming_it(registry):
    content = {"call_id": 3, "function_id": 12345, "call_count": 1, "counts": [0] * 6}
    reply, out = serve(content, [], registry)
    assert reply["status"] == ReplyStatus.ERROR and out == []
    assert reply["ename"] == "UnknownFunction" and "12345" in reply["evalue"]
    assert reply["call_id"] == 3 and reply["function_id"] == 12345


def test_exception_in_a_plain_function_carries_the_call_index(registry):
    def f(x, y, z):
        if x == 7:
            raise ZeroDivisionError("x is 7")
        return x

    sig = registry.add(TypedSignature.build("f", XYZ, returns="float64"), f)
    content, frames, n = request(sig, np.arange(10.0), 0.0, 0.0)
    reply, _ = serve(content, frames, registry)
    assert reply["status"] == ReplyStatus.ERROR
    assert (reply["ename"], reply["evalue"], reply["call_index"]) == (
        "ZeroDivisionError",
        "x is 7",
        7,
    )
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, reply, [])
    with pytest.raises(RemoteCallError) as info:
        decode_typed_reply(msg, sig, (11, 100, 10))  # a chunk starting at call 100
    assert info.value.call_index == 107 and "call 107" in str(info.value)
    assert isinstance(info.value, zpar.RemoteError)


def test_wrong_return_shape_and_counts_mismatch_are_error_replies(registry):
    sig = registry.add(
        TypedSignature.build("f", [("x", "float64"), ("y", "float64", "out")], returns="float64"),
        lambda x: x,  # returns one value, two declared
    )
    content, frames, n = request(sig, [1.0, 2.0])
    reply, _ = serve(content, frames, registry)
    assert reply["ename"] == "TypeError" and "tuple of 2 values" in reply["evalue"]
    assert reply["call_index"] == 0
    content["counts"] = [0, 0, 0, 3, 0, 0]
    reply, _ = serve(content, frames, registry)
    assert reply["ename"] == "ProtocolError"


def test_reply_of_another_call_or_function_is_a_remote_protocol_error():
    sig = sig_xyz()
    reply = {
        "status": "ok",
        "call_id": 12,
        "function_id": sig.function_id,
        "call_count": 1,
        "counts": [0, 0, 0, 1, 0, 0],
    }
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, reply, [b"\0" * 8])
    with pytest.raises(RemoteProtocolError, match="call_id 11"):
        decode_typed_reply(msg, sig, (11, 0, 1))
    reply = {**reply, "call_id": 11, "function_id": 99}
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, reply, [b"\0" * 8])
    with pytest.raises(RemoteProtocolError, match="function id 99"):
        decode_typed_reply(msg, sig, (11, 0, 1))


def test_failures_not_from_the_handler_raise_their_own_errors():
    sig = sig_xyz()
    died = {
        "status": "error",
        "ename": "EngineError",
        "evalue": "engine 1 died",
        "zpar_error": True,
    }
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, died, [])
    with pytest.raises(zpar.EngineError, match="engine 1 died"):
        decode_typed_reply(msg, sig, (11, 0, 1))
    broken = {"status": "error", "ename": "RuntimeError", "evalue": "cannot load the handler"}
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, broken, [])
    with pytest.raises(zpar.RemoteError, match="cannot load"):
        decode_typed_reply(msg, sig, (11, 0, 1))
    aborted = {"status": "aborted", "evalue": "aborted before it ran"}
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, aborted, [])
    with pytest.raises(zpar.TaskAborted):
        decode_typed_reply(msg, sig, (11, 0, 1))
    ok = {"status": "ok", "call_id": 11, "function_id": sig.function_id, "call_count": 1}
    msg = Message([], {"msg_type": "apply_reply"}, {}, {}, ok, [])
    with pytest.raises(RemoteProtocolError, match="apply_reply answered"):
        decode_typed_reply(msg, sig, (11, 0, 1))


def test_no_pickle_on_the_call_path(registry, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("pickle used on the typed call path")

    for name in ("dumps", "loads", "dump", "load"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr("zpar.serialize.serialize_object", refuse)
    monkeypatch.setattr("zpar.serialize.deserialize_object", refuse)
    sig = registry.add(
        TypedSignature.build("f", XYZ, returns="float64", vectorized=True),
        lambda x, y, z: x * y * z,
    )
    content, frames, n = request(sig, np.arange(5.0), 2.0, 3.0)
    reply, out = serve(content, frames, registry)
    msg = Message([], {"msg_type": "typed_reply"}, {}, {}, reply, out)
    assert join_chunks(sig, [decode_typed_reply(msg, sig, (11, 0, 5))]).tolist() == [
        0,
        6,
        12,
        18,
        24,
    ]


# -- the kernel finds the handler through its entry point ----------------------------------


def test_kernel_runs_typed_request_through_the_entry_point():
    assert MsgType.TYPED_REQUEST in TASK_REQUESTS
    assert REPLY_TYPE[MsgType.TYPED_REQUEST] == MsgType.TYPED_REPLY

    @typed_function(args=XYZ, returns="float64", name="typed_test_kernel", vectorized=True)
    def f(x, y, z):
        return x + y + z

    kernel = Kernel(4, "uuid-4")
    try:
        assert MsgType.TYPED_REQUEST not in kernel._handlers  # nothing loaded before use
        content, frames, n = request(f.__typed__, np.arange(3.0), 1.0, 1.0)
        session = Session(b"k")
        msg = Message([b"c"], session.make_header(MsgType.TYPED_REQUEST), {}, {}, content, frames)
        reply = kernel.handle(msg)
        assert reply.msg_type == MsgType.TYPED_REPLY
        assert reply.content["status"] == ReplyStatus.OK
        assert type_arrays(reply.content["counts"], reply.buffers)["float64"].tolist() == [
            2.0,
            3.0,
            4.0,
        ]
        bad = Message(
            [b"c"],
            session.make_header(MsgType.TYPED_REQUEST),
            {},
            {},
            {**content, "function_id": 1},
            frames,
        )
        err = kernel.handle(bad)
        assert err.content["ename"] == "UnknownFunction"
        assert err.content["engine_info"]["engine_id"] == 4
        assert kernel.handle(msg).content["status"] == ReplyStatus.OK  # still serving
    finally:
        REGISTRY.remove("typed_test_kernel")
        namespace.set_current(None)


def test_kernel_ignores_a_type_no_package_declares():
    kernel = Kernel(5, "uuid-5")
    try:
        msg = Message([b"c"], Session(b"k").make_header(MsgType.STATUS), {}, {}, {}, [])
        assert kernel.handle(msg) is None
        assert MsgType.STATUS in kernel._looked_up
    finally:
        namespace.set_current(None)
