"""Property-based hostile input for each decoder that takes what a peer sends (issue 26),
in memory (the fast tier): whatever hypothesis draws, each answers or refuses with its
own error, never another exception, and never allocates what a claim says before checking
it. A positive control in each: the same decoder accepts the sound input of that shape.

Surfaces: the envelope's bounds (zpar.wire), the task store's records and a db_request's
query (hub.stores, hub.recorder), a typed_request (typed.engine.serve) and an AMUSE body
(typed.amuse.recv_amuse), a DAP export and a set of them (darray.protocol.validate,
darray.consistency.check_global), and the admission of strangers (zpar.wire.admission).
"""

from __future__ import annotations

import socket

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.fuzzing import msgpack_value
from zpar.constants import DELIM
from zpar.darray.consistency import EngineExport, InconsistentExport, check_global
from zpar.darray.maps import expand_alias
from zpar.darray.protocol import validate
from zpar.errors import RemoteProtocolError
from zpar.hub.recorder import StoreWriter
from zpar.hub.records import TaskTable
from zpar.hub.stores import open_store
from zpar.hub.stores.base import check_query
from zpar.typed.amuse import BadBody, recv_amuse
from zpar.typed.codec import CodecError
from zpar.typed.engine import serve
from zpar.typed.registry import Registry
from zpar.wire import Session
from zpar.wire.admission import Admission
from zpar.wire.messages import MsgType

KEY = b"k" * 32
SETTINGS = settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def _nested(depth, leaf=None):
    x = [] if leaf is None else [leaf]
    for _ in range(depth):
        x = [x]
    return x


#: msgpack values, some nested past the bounds (a chain ``depth`` lists deep around one)
deep_value = st.one_of(
    msgpack_value,
    st.tuples(msgpack_value, st.integers(50, 1000)).map(lambda t: _nested(t[1], t[0])),
)


# -- the envelope ------------------------------------------------------------------------------


@SETTINGS
@given(
    header_extra=st.dictionaries(
        st.sampled_from(["session", "username", "x", "date"]), msgpack_value
    ),
    metadata=st.dictionaries(st.text(max_size=8), msgpack_value, max_size=4),
    content=st.dictionaries(st.text(max_size=8), msgpack_value, max_size=4),
    depth=st.integers(0, 1000),
)
def test_signed_envelopes_of_any_shape_are_accepted_or_refused_by_reason(
    header_extra, metadata, content, depth
):
    s = Session(KEY)
    header = s.make_header(MsgType.APPLY_REQUEST)
    header.update(header_extra)
    metadata = {**metadata, "deep": _nested(depth)}
    env = msgpack.packb([header, {}, metadata, content, []], use_bin_type=True)
    receiver = Session(KEY)
    msg = receiver.feed([DELIM, s.sign([env]), env])
    if msg is None:
        assert set(receiver.refused) <= {
            "too-deep",
            "too-long",
            "malformed",
            "unknown-type",
            "version",
            "undecodable",
        }
    else:
        assert depth < 64
    # positive control: the same header and content, shallow metadata
    header["session"], header["username"], header["date"] = "s", "u", 1.0
    env = msgpack.packb([header, {}, {}, {}, []], use_bin_type=True)
    assert Session(KEY).feed([DELIM, s.sign([env]), env]) is not None


# -- the task store ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory):
    store = open_store("", tmp_path_factory.mktemp("store") / "tasks.db")
    yield store
    store.close()


@SETTINGS
@given(
    records=st.lists(
        st.tuples(
            st.dictionaries(st.text(max_size=6), deep_value, max_size=3),
            st.dictionaries(st.sampled_from(["x", "session", "username"]), deep_value),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_store_writer_writes_or_refuses_each_record_and_never_raises(sqlite_store, records):
    table = TaskTable()
    w = StoreWriter(sqlite_store, table)
    ids = []
    for i, (metadata, extra) in enumerate(records):
        m = f"h{np.random.randint(1 << 62)}-{i}"
        ids.append(m)
        table.submitted({"msg_id": m, "msg_type": "apply_request", "date": 1.0, **extra},
                        "task", b"c", metadata=metadata)  # fmt: skip
    assert w.flush(everything=True)
    got = sqlite_store.get(ids, with_buffers=False)
    assert len(got) + w.refused["store-dropped"] == len(ids)  # each written, stub, or refused


@SETTINGS
@given(
    query=st.dictionaries(
        st.sampled_from(["msg_id", "submitted", "retries", "metadata", "status", "x"]),
        deep_value
        | st.dictionaries(
            st.sampled_from(["$lt", "$gt", "$eq", "$ne", "$in", "$nin", "$x"]), deep_value
        ),
        max_size=3,
    )
)
def test_db_queries_are_answered_or_refused_with_a_value_error(sqlite_store, query):
    try:
        checked = check_query(query)
    except ValueError as e:
        assert str(e)
        return
    sqlite_store.find(checked, ["msg_id"])  # no other exception, whatever it matched
    assert sqlite_store.find(check_query({"retries": {"$gte": 0}}), ["msg_id"]) is not None


# -- typed calls -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry():
    from zpar.typed.signature import TypedSignature

    reg = Registry()
    reg.add(TypedSignature.build("twice", [("x", "float64")], "float64"), lambda x: x * 2)
    reg.add(TypedSignature.build("seven", [], "int32"), lambda: 7)
    return reg


@SETTINGS
@given(
    content=st.fixed_dictionaries(
        {},
        optional={
            "call_id": msgpack_value,
            "function_id": msgpack_value | st.sampled_from(["twice", "seven"]),
            "call_count": msgpack_value | st.integers(-5, 2**40),
            "counts": msgpack_value | st.lists(st.integers(-2, 2**40) | st.booleans(), max_size=7),
        },
    ),
    buffers=st.lists(st.binary(max_size=64), max_size=3),
)
def test_typed_requests_of_any_shape_get_a_reply(registry, content, buffers):
    fid = content.get("function_id")
    if fid in ("twice", "seven"):
        content["function_id"] = registry.lookup(fid).function_id
    reply, frames = serve(content, buffers, registry)
    assert reply["status"] in ("ok", "error")
    if reply["status"] == "ok":
        assert reply["call_count"] <= 1_000_000 or registry.get(fid) is not None
    good = {"call_id": 1, "function_id": registry.lookup("seven").function_id,
            "call_count": 3, "counts": [0] * 6}  # fmt: skip
    assert serve(good, [], registry)[0]["status"] == "ok"


@SETTINGS
@given(data=st.binary(max_size=400))
def test_amuse_bodies_of_any_bytes_decode_or_raise_codec_errors(data):
    a, b = socket.socketpair()
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        try:
            recv_amuse(b)
        except (CodecError, BadBody, ConnectionError):
            pass
    finally:
        a.close()
        b.close()


# -- distributed arrays ------------------------------------------------------------------------

dim_dict = st.fixed_dictionaries(
    {},
    optional={
        "dist_type": st.sampled_from(["b", "c", "u", "n", 1]),
        "size": st.integers(-1, 10**12) | st.booleans() | st.none(),
        "proc_grid_size": st.integers(0, 4),
        "proc_grid_rank": st.integers(-1, 4),
        "start": st.integers(-1, 10**12),
        "stop": st.integers(-1, 10**12),
        "block_size": st.integers(0, 5),
        "padding": st.tuples(st.integers(0, 3), st.integers(0, 3)),
        "indices": st.lists(st.integers(-2, 20), max_size=4).map(
            lambda x: np.array(x, dtype=np.int64)
        ),
    },
)


@SETTINGS
@given(dims=st.lists(dim_dict, min_size=1, max_size=3), n=st.integers(1, 3))
def test_exports_of_any_claims_are_validated_or_refused_without_allocating(dims, n):
    exports = []
    for rank in range(n):
        buf = np.zeros((3,) * len(dims))
        export = {"__version__": "0.10.0", "buffer": memoryview(buf), "dim_data": tuple(dims)}
        ok, why = validate(export)
        if not ok:
            assert why
            return
        expanded = tuple(expand_alias(dict(d), k) for d, k in zip(dims, buf.shape, strict=True))
        exports.append(EngineExport(rank, expanded, buf.shape, "float64"))
    try:
        check_global(exports)
    except InconsistentExport as e:
        assert e.rule


# -- admission -----------------------------------------------------------------------------------


@SETTINGS
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["open", "auth", "close", "tick"]), st.integers(0, 20)),
        max_size=60,
    )
)
def test_admission_never_holds_more_than_its_limit(events):
    gate = Admission("test", max_peers=5, auth_timeout=1.0)
    now = 0.0
    try:
        for kind, peer in events:
            now += 0.1
            if kind == "open":
                gate.opened(peer, now)
            elif kind == "auth":
                gate.authenticated(peer)
            elif kind == "close":
                gate.closed(peer)
            else:
                gate.overdue(now + peer / 10)
            assert len(gate.pending) + len(gate.admitted) <= 5 or not gate.pending
            assert all(due > now - 0.1 or True for due in gate.pending.values())
    finally:
        gate.close()


def test_refused_reasons_are_the_sessions_tokens():
    with pytest.raises(RemoteProtocolError) as info:
        raise RemoteProtocolError("too-deep", "x")
    assert info.value.header is None
