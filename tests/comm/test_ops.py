"""Reduction ops against numpy and against mpi4py's object semantics (opimpl.pxi)."""

import pickle

import numpy as np
import pytest

import zpar.comm.ops as ops
from zpar.comm.flow import RecvCounter, SendWindow, check_window


@pytest.mark.parametrize(
    ("op", "ufunc"),
    [
        (ops.SUM, np.add),
        (ops.PROD, np.multiply),
        (ops.MAX, np.maximum),
        (ops.MIN, np.minimum),
        (ops.BAND, np.bitwise_and),
        (ops.BOR, np.bitwise_or),
        (ops.BXOR, np.bitwise_xor),
    ],
)
def test_predefined_on_arrays_match_numpy(op, ufunc):
    a, b = np.array([3, 5, 12, -1]), np.array([6, 5, 10, 2])
    assert np.array_equal(op.combine(a, b), ufunc(a, b))
    assert op(7, 3) == ufunc(7, 3)


def test_logical_ops_keep_dtype_and_objects_give_bools():
    a, b = np.array([0, 1, 2, 0]), np.array([0, 0, 3, 4])
    assert ops.LAND.combine(a, b).tolist() == [0, 0, 1, 0]
    assert ops.LOR.combine(a, b).tolist() == [0, 1, 1, 1]
    assert ops.LAND(2, 0) is False and ops.LOR(0, 3) is True


def test_maxloc_minloc_objects_ties_go_to_smaller_index():
    assert ops.MAXLOC((5, 3), (5, 1)) == (5, 1)
    assert ops.MAXLOC((6, 3), (5, 1)) == (6, 3)
    assert ops.MINLOC((2, 4), (2, 0)) == (2, 0)
    assert ops.MINLOC((1, 4), (2, 0)) == (1, 4)


def test_maxloc_on_pair_arrays():
    dt = np.dtype([("v", "f8"), ("i", "i4")])
    a = np.array([(1.0, 0), (5.0, 0), (2.0, 0)], dtype=dt)
    b = np.array([(3.0, 1), (5.0, 1), (1.0, 1)], dtype=dt)
    out = ops.MAXLOC.combine(a, b)
    assert out["v"].tolist() == [3.0, 5.0, 2.0] and out["i"].tolist() == [1, 0, 0]
    out = ops.MINLOC.combine(b, a)
    assert out["v"].tolist() == [1.0, 5.0, 1.0] and out["i"].tolist() == [0, 0, 1]
    with pytest.raises(TypeError, match="structured"):
        ops.MAXLOC.combine(np.arange(3), np.arange(3))


def test_user_op_create_buffer_and_object_forms():
    def absmax(invec, inoutvec, datatype):
        if datatype is None:  # objects: mpi4py calls function(x, y, None) and uses its result
            return max(invec, inoutvec, key=abs)
        np.copyto(inoutvec, np.where(np.abs(invec) > np.abs(inoutvec), invec, inoutvec))

    op = ops.Op.Create(absmax, commute=True)
    assert op.commute
    assert op.combine(np.array([-5, 1]), np.array([3, -2])).tolist() == [-5, -2]
    assert op(-5, 3) == -5
    plain = ops.as_op(lambda x, y: x + y)
    assert plain.commute is False and plain("a", "b") == "ab"
    with pytest.raises(TypeError, match="callable"):
        ops.as_op(3)


def test_predefined_ops_unpickle_to_themselves():
    assert pickle.loads(pickle.dumps(ops.SUM)) is ops.SUM


def test_credit_window_stalls_at_hiwater_and_resumes_on_ack():
    check_window(2, 4)
    with pytest.raises(ValueError):
        check_window(5, 4)
    w, c = SendWindow(hiwater=4), RecvCounter(ackmark=2)
    acks = []
    for _ in range(4):
        assert w.can_send()
        w.sent()
    assert not w.can_send()
    with pytest.raises(RuntimeError):
        w.sent()
    for _ in range(4):
        acks.append(c.received())
    assert acks == [0, 2, 0, 2]
    w.acked(2)
    assert w.can_send() and w.inflight == 2
    with pytest.raises(ValueError):
        w.acked(3)
