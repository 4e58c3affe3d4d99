"""What runs on an engine for a distributed array: each function finds its LocalArrays in
the engine's namespace by key, so data stays where it is and only results travel.

The client calls these by reference (``zpar.darray.engine.allocate`` ...); names are the
keys ``rc[targets].pull(da.key)`` reads back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zpar import namespace
from zpar.darray import bufferpool, shmgather
from zpar.darray.localarray import LocalArray
from zpar.darray.maps import expand_alias, outer_key
from zpar.darray.protocol import validate

log = logging.getLogger("zpar.darray")


@dataclass(frozen=True)
class Ref:
    """An operand that is a LocalArray on the engine (by key), not a value sent along."""

    key: str


def local(key: str) -> LocalArray:
    try:
        la = namespace.current()[key]
    except KeyError:
        raise NameError(f"no distributed array {key!r} on this engine (freed?)") from None
    if not isinstance(la, LocalArray):
        raise TypeError(f"{key!r} on this engine is a {type(la).__name__}, not a LocalArray")
    return la


def _local_shape(dim_data: Sequence[dict[str, Any]]) -> tuple[int, ...]:
    from zpar.darray.maps import map_from_dim_dict

    return tuple(map_from_dim_dict(dd).local_len for dd in dim_data)


def _store(key: str, la: LocalArray) -> None:
    namespace.current()[key] = la


def allocate(
    key: str, dim_data: Sequence[dict[str, Any]], dtype: str, fill: Any, empty: bool
) -> None:
    """A new LocalArray: owned cells set to ``fill`` (ghost cells zero until a halo
    exchange). Without communication padding it is a constant section: no memory is
    touched until something writes to it or exports it (zpar.darray.localarray)."""
    from zpar.darray.maps import map_from_dim_dict

    maps = [map_from_dim_dict(dd) for dd in dim_data]
    shape = tuple(m.local_len for m in maps)
    if all(m.owned_slice == slice(0, m.local_len) for m in maps):
        _store(key, LocalArray.constant(shape, None if empty else fill, dtype, dim_data))
        return
    buf = bufferpool.empty(shape, dtype)
    la = LocalArray(buf, dim_data)
    if not empty:
        buf[...] = 0  # ghost cells
        la.owned[...] = fill
    _store(key, la)


def place(key: str, dim_data: Sequence[dict[str, Any]], dtype: str, piece: np.ndarray) -> None:
    """A new LocalArray whose owned cells are ``piece`` (sent by the client)."""
    shape = _local_shape(dim_data)
    la = LocalArray(bufferpool.empty(shape, dtype), dim_data)
    if la.owned.shape != shape:
        la.ndarray[...] = 0  # ghost cells
    la.owned[...] = piece
    _store(key, la)


#: from_function evaluates the user's function over this many cells at a time: its
#: temporaries stay a few MB (reused by malloc, in cache) instead of section-sized fresh
#: memory, which costs a page fault per 4 KiB on first touch
FROMFUNCTION_CELLS = 1 << 19


def from_function(
    key: str, dim_data: Sequence[dict[str, Any]], dtype: str, func: Callable[..., Any]
) -> None:
    """As ``numpy.fromfunction``: ``func`` gets one array of global indices per dimension
    (broadcastable, as numpy's ``sparse`` grids), for blocks of rows of the owned cells in
    turn, as dask.array.fromfunction calls it per chunk: it must work cell by cell."""
    from zpar.darray.maps import map_from_dim_dict

    maps = [map_from_dim_dict(dd) for dd in dim_data]
    shape = tuple(m.local_len for m in maps)
    padded = any(m.owned_slice != slice(0, m.local_len) for m in maps)
    la = LocalArray(
        bufferpool.zeros(shape, dtype) if padded else bufferpool.empty(shape, dtype), dim_data
    )
    owned = la.owned
    if not shape:
        owned[...] = func()
        _store(key, la)
        return
    index = [m.global_indices() for m in la.maps]
    rows = max(1, FROMFUNCTION_CELLS // max(1, math.prod(owned.shape[1:])))
    for r0 in range(0, owned.shape[0], rows):
        grids = np.meshgrid(index[0][r0 : r0 + rows], *index[1:], indexing="ij", sparse=True)
        owned[r0 : r0 + rows] = func(*grids)
    _store(key, la)


def owned(key: str) -> np.ndarray:
    """The owned cells, contiguous (the buffer itself when unpadded: sent without a copy);
    a constant section sends its one value (0-d), which the client broadcasts into place."""
    la = local(key)
    if la.constant_value is not None:
        return la.constant_value
    cells = la.owned
    return cells if cells.flags.c_contiguous else np.ascontiguousarray(cells)


def owned_into(
    key: str, path: str, shape: Sequence[int], dtype: np.dtype, where: Sequence[Any]
) -> np.ndarray | None:
    """The owned cells written into the client's shared array at ``path`` (darray.shmgather)
    when this engine shares the client's host: None; else the cells themselves."""
    la = local(key)
    cells = la.constant_value if la.constant_value is not None else la.owned
    if shmgather.write_into(path, shape, dtype, where, cells):
        return None
    return owned(key)


def take(key: str, local_keys: Sequence[slice | np.ndarray]) -> np.ndarray:
    """The cells at the outer product of local per-dimension indices."""
    buf = local(key).values
    return np.ascontiguousarray(buf[outer_key(local_keys)] if local_keys else buf[()])


def elementwise(
    out: str | Sequence[str] | None,
    ufunc: np.ufunc,
    operands: Sequence[Any],
    kwargs: dict[str, Any],
) -> str | list[str]:
    """``ufunc`` over whole buffers (owned and ghost cells alike); the results have the
    operands' distribution. ``out``: a new key (a sequence of keys for a ufunc with several
    outputs, as ``divmod``), or None to write into the output operand given in
    ``kwargs['out']`` (a Ref). Returns the result's dtype (a list: one per key).

    Constant operands are read as stride-0 views; when every operand is a constant (or a
    scalar) the result is a constant too, computed once."""
    sections = [local(o.key) if isinstance(o, Ref) else None for o in operands]
    template = next(la for la in sections if la is not None)

    def each(of_section: Callable[[LocalArray], Any]) -> list[Any]:
        return [
            of_section(la) if la is not None else o
            for la, o in zip(sections, operands, strict=True)
        ]

    consts = each(lambda la: la.constant_value)
    all_constant = all(c is not None for c in consts) and "where" not in kwargs
    if "out" in kwargs:
        target = local(kwargs.pop("out").key)
        if all_constant and target.constant_value is not None:
            target.set_constant(ufunc(*consts, out=np.empty((), target.dtype), **kwargs))
        else:
            ufunc(*each(lambda la: la.values), out=target.ndarray, **kwargs)
        return str(target.dtype)
    assert out is not None
    keys = (out,) if isinstance(out, str) else tuple(out)
    if all_constant:
        values = ufunc(*consts, **kwargs)
        values = [np.asarray(v) for v in (values if ufunc.nout > 1 else (values,))]
        for k, v in zip(keys, values, strict=True):
            _store(k, LocalArray.constant(template.shape, v, v.dtype, template.dim_data))
    else:
        args = each(lambda la: la.values)
        # the results' dtypes, from empty operands (numpy's own promotion rules), so the
        # results can be written into recycled buffers
        probes = ufunc(*each(lambda la: np.empty(0, la.dtype)), **kwargs)
        probes = probes if ufunc.nout > 1 else (probes,)
        shape = np.broadcast_shapes(*[np.shape(a) for a in args])
        bufs = tuple(bufferpool.empty(shape, p.dtype) for p in probes)
        ufunc(*args, out=bufs, **kwargs)
        values = list(bufs)
        for k, v in zip(keys, values, strict=True):
            _store(k, LocalArray(v, template.dim_data))
    dtypes = [str(v.dtype) for v in values]
    return dtypes[0] if isinstance(out, str) else dtypes


def astype(key: str, out: str, dtype: str) -> None:
    la = local(key)
    c = la.constant_value
    if c is not None:
        _store(out, LocalArray.constant(la.shape, c.astype(dtype), dtype, la.dim_data))
        return
    _store(out, LocalArray(la.ndarray.astype(dtype), la.dim_data))


def copy(key: str, out: str) -> None:
    la = local(key)
    c = la.constant_value
    if c is not None:
        _store(out, LocalArray.constant(la.shape, c, c.dtype, la.dim_data))
        return
    buf = bufferpool.empty(la.shape, la.dtype)
    buf[...] = la.ndarray
    _store(out, LocalArray(buf, la.dim_data))


def free(keys: Sequence[str]) -> None:
    """Drop sections; their memory is kept for the next section of the same shape if
    nothing else refers to it (zpar.darray.bufferpool)."""
    ns = namespace.current()
    for k in keys:
        la = ns.pop(k, None)
        if isinstance(la, LocalArray):
            bufferpool.recycle(la)
        del la


def adopt(name: str, key: str) -> tuple[Any, ...]:
    """Wrap the engine's object ``name`` (any ``__distarray__`` exporter) as a LocalArray
    sharing its memory; returns what the client checks: (ok, why, dim_data, shape, dtype)."""
    obj = namespace.pull(name)
    if not hasattr(obj, "__distarray__"):
        return False, f"{name!r} is a {type(obj).__name__} without __distarray__", None, None, None
    try:
        export = obj.__distarray__()
    except Exception as e:  # a foreign exporter's bug is reported, not raised
        return False, f"{name}.__distarray__() raised {type(e).__name__}: {e}", None, None, None
    ok, why = validate(export)
    if not ok:
        return False, why, None, None, None
    buf = np.asarray(export["buffer"])  # a view of the exporter's memory
    dim_data = tuple(
        expand_alias(dict(dd), n) for dd, n in zip(export["dim_data"], buf.shape, strict=True)
    )
    la = LocalArray(buf, dim_data)
    _store(key, la)
    log.debug("darray %s: adopted %r as %s", key, name, la)
    return True, "", la.dim_data, buf.shape, str(buf.dtype)


# -- engine to engine (over the communicator the engine holds under ``comm_key``) ----------


def _comm(comm_key: str) -> Any:
    try:
        return namespace.current()[comm_key]
    except KeyError:
        raise NameError(f"no communicator {comm_key!r} on this engine (freed?)") from None


def _comm_op(comm: Any, op: str) -> Any:
    """The communicator's own SUM / MIN / MAX (mpi4py keeps them on ``MPI``; zpar's
    communicator carries the predefined operations as attributes)."""
    return getattr(comm, op.upper())


def reduce_all(key: str, comm_key: str, op: str) -> Any:
    """The whole array's ``op``; every rank computes it, rank 0's answer is returned."""
    from zpar.darray.collective import reduce_all as run

    comm = _comm(comm_key)
    value = run(local(key), comm, op, _comm_op(comm, op))
    return value if comm.rank == 0 else None


def reduce_axis(
    key: str,
    comm_key: str,
    op: str,
    axis: int,
    coords_of: Sequence[tuple[int, ...]],
    out: str,
    result_dim_data: Sequence[Sequence[dict[str, Any]] | None],
) -> str | None:
    """``op`` along ``axis``, engine to engine: the first position of each grid line along
    ``axis`` keeps the line's combined result as its section of a new distributed array
    (``out``, placed by ``result_dim_data[rank]``) and returns its dtype; others None."""
    from zpar.darray.collective import reduce_axis as run

    comm = _comm(comm_key)
    part = run(local(key), comm, op, axis, coords_of)
    if part is None:
        return None
    part = np.asarray(part)
    _store(out, LocalArray(part, result_dim_data[comm.rank]))  # type: ignore[arg-type]
    return str(part.dtype)


def exchange_halos(
    key: str, comm_key: str, coords_of: Sequence[tuple[int, ...]], paddings: Any
) -> None:
    from zpar.darray.collective import exchange_halos as run

    run(local(key), _comm(comm_key), coords_of, paddings)


def redistribute(key: str, comm_key: str, out: str, new_dim_data: Any) -> None:
    from zpar.darray.collective import redistribute as run

    _store(out, run(local(key), _comm(comm_key), new_dim_data))


def call_local(key: str, func: Callable[..., Any], args: Sequence[Any]) -> Any:
    """``func(local_array, *args)`` on this engine's section (a user's local kernel)."""
    return func(local(key), *args)
