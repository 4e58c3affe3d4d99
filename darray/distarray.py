"""``DistArray``: the client's handle on an array whose sections live on engines.

Elementwise numpy ufuncs and arithmetic run on the engines over their own sections (the
result is distributed the same way); ``toarray()`` and indexing bring cells to the client,
as zero-copy frames from each engine. Reductions, halo exchange and redistribution run
engine to engine (``zpar.darray.collective``).
"""

from __future__ import annotations

import numbers
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import engine, shmgather
from .layout import plan
from .maps import Distribution, block_bounds, global_keys, outer_key, owned_dim_dict


def new_key() -> str:
    """A namespace name no user would pick: where each engine keeps its LocalArray."""
    return f"_darray_{uuid.uuid4().hex[:12]}"


def _free(client: Any, targets: list[int], key: str) -> None:
    """Drop the engines' sections when the handle goes (best effort: never raises)."""
    try:
        if not client._closed:
            client[targets].apply_async(engine.free, [key])
    except Exception:  # noqa: BLE001 - a finalizer must not raise (client closing, engine gone)
        pass


def as_slice(ix: np.ndarray) -> slice | np.ndarray:
    """Evenly rising indices as a slice (a view on the engine), anything else unchanged."""
    if len(ix) == 0:
        return slice(0, 0)
    if len(ix) == 1:
        return slice(int(ix[0]), int(ix[0]) + 1)
    step = int(ix[1] - ix[0])
    if step > 0 and np.all(np.diff(ix) == step):
        return slice(int(ix[0]), int(ix[-1]) + 1, step)
    return ix


def _same_layout(a: Sequence[tuple[dict, ...]], b: Sequence[tuple[dict, ...]]) -> bool:
    def norm(dd: dict) -> dict:
        return {k: (tuple(np.asarray(v).tolist()) if k == "indices" else v) for k, v in dd.items()}

    return len(a) == len(b) and all(
        [norm(x) for x in ra] == [norm(y) for y in rb] for ra, rb in zip(a, b, strict=True)
    )


class DistArray(NDArrayOperatorsMixin):
    """A distributed array: ``shape``, ``dtype``, ``dist``, ``grid_shape``, ``targets``
    (target i holds grid rank i) and ``key`` (the name of each target's LocalArray)."""

    def __init__(
        self,
        client: Any,
        key: str,
        targets: Sequence[int],
        dim_data: Sequence[tuple[dict[str, Any], ...]],
        dtype: np.dtype,
        distribution: Distribution | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.targets = list(targets)
        self.dim_data = [tuple(dd) for dd in dim_data]
        self.dtype = np.dtype(dtype)
        self._distribution = distribution
        first = self.dim_data[0]
        self.shape = tuple(int(d["size"]) for d in first)
        self.grid_shape = tuple(int(d["proc_grid_size"]) for d in first)
        self._finalizer = weakref.finalize(self, _free, client, self.targets, key)

    # -- description ------------------------------------------------------------------------

    @property
    def distribution(self) -> Distribution:
        if self._distribution is None:
            self._distribution = Distribution(self.dim_data)
        return self._distribution

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d distributed array")
        return self.shape[0]

    @property
    def dist(self) -> tuple[Any, ...]:
        """One entry per dimension, in the constructors' ``dist`` notation."""
        out: list[Any] = []
        for ax in self.distribution.axes:
            m = ax.maps[0]
            if ax.dist_type == "b":
                bounds = [a.owned_start for a in ax.maps] + [ax.size]  # type: ignore[attr-defined]
                if ax.grid_size == 1:
                    out.append("n")
                elif bounds == block_bounds(ax.size, ax.grid_size):
                    out.append("b")
                else:
                    out.append(("b", bounds))
            elif ax.dist_type == "c":
                bs = m.block_size  # type: ignore[attr-defined]
                out.append("c" if bs == 1 else ("c", bs))
            else:
                out.append(("u", [a.global_indices() for a in ax.maps]))
        return tuple(out)

    @property
    def padding(self) -> tuple[tuple[int, int], ...]:
        return tuple(tuple(d.get("padding", (0, 0))) for d in self.dim_data[0])  # type: ignore[misc]

    def __repr__(self) -> str:
        dist = tuple("u" if isinstance(d, tuple) and d[0] == "u" else d for d in self.dist)
        pad = f", padding={self.padding}" if any(p != (0, 0) for p in self.padding) else ""
        return (
            f"DistArray(shape={self.shape}, dtype={self.dtype}, dist={dist}, "
            f"grid_shape={self.grid_shape}{pad}, targets={self.targets}, key={self.key!r})"
        )

    # -- engine calls -----------------------------------------------------------------------

    def _on_all(self, f: Any, *args: Any) -> list[Any]:
        return self.client[self.targets].apply_sync(f, *args)

    def free(self) -> None:
        """Drop the sections on the engines now (also done when the handle is collected)."""
        if self._finalizer.detach():
            self._on_all(engine.free, [self.key])

    # -- to the client ----------------------------------------------------------------------

    def toarray(self) -> np.ndarray:
        """The whole array on the client. Engines of this host write their owned cells
        straight into a shared result (darray.shmgather, arrays of 1 MiB and up); others
        send them as frames, each copied into place while the next ones still arrive."""
        with shmgather.shared_result(self.shape, self.dtype) as shared:
            if shared is None:
                out = np.empty(self.shape, dtype=self.dtype)
                ars = [self.client[e].apply_async(engine.owned, self.key) for e in self.targets]
            else:
                path, out = shared
                ars = [
                    self.client[eid].apply_async(
                        engine.owned_into,
                        self.key,
                        path,
                        self.shape,
                        self.dtype,
                        global_keys(self.distribution.local_maps[rank]),
                    )
                    for rank, eid in enumerate(self.targets)
                ]
            for rank, ar in enumerate(ars):
                piece = ar.get()
                maps = self.distribution.local_maps[rank]
                if piece is None:  # written in place by an engine of this host
                    continue
                if not maps:
                    out[()] = piece
                elif piece.size:
                    out[outer_key(global_keys(maps))] = piece
        return out

    gather = toarray

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``numpy.asarray(da)``: the gathered array (as dask.array computes); always a
        new array on the client, so ``copy=False`` is refused as numpy asks."""
        if copy is False:
            raise ValueError("a DistArray cannot become a numpy array without a copy")
        out = self.toarray()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, index: Any) -> Any:
        """Single elements and slices (ints, slices, Ellipsis), fetched from their owners."""
        keys = self._normalize_index(index)
        d = self.distribution
        wanted, owners, locals_ = [], [], []
        for axis, k in enumerate(keys):
            req = np.arange(self.shape[axis])[k] if isinstance(k, slice) else np.array([k])
            owner, loc = d.axes[axis].locate(req)
            wanted.append(req)
            owners.append(owner)
            locals_.append(loc)
        out = np.empty(tuple(len(w) for w in wanted), dtype=self.dtype)
        calls = []
        for rank, eid in enumerate(self.targets):
            coords = d.coords(rank)
            pos = [np.flatnonzero(o == c) for o, c in zip(owners, coords, strict=True)]
            if any(len(p) == 0 for p in pos):
                continue
            local_keys = [as_slice(lc[p]) for lc, p in zip(locals_, pos, strict=True)]
            ar = self.client[eid].apply_async(engine.take, self.key, local_keys)
            calls.append((pos, ar))
        for pos, ar in calls:
            out[np.ix_(*pos) if pos else ()] = ar.get()
        squeeze = tuple(0 if not isinstance(k, slice) else slice(None) for k in keys)
        result = out[squeeze]
        return (
            result.item()
            if result.ndim == 0 and not isinstance(result, np.ndarray | np.generic)
            else result
        )

    def _normalize_index(self, index: Any) -> list[int | slice]:
        index = index if isinstance(index, tuple) else (index,)
        if sum(i is Ellipsis for i in index) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in index:
            at = index.index(Ellipsis)
            fill = (slice(None),) * (self.ndim - len(index) + 1)
            index = index[:at] + fill + index[at + 1 :]
        if len(index) > self.ndim:
            raise IndexError(f"too many indices: {len(index)} for {self.ndim} dimensions")
        index = index + (slice(None),) * (self.ndim - len(index))
        out: list[int | slice] = []
        for axis, i in enumerate(index):
            if isinstance(i, slice):
                out.append(i)
            elif isinstance(i, numbers.Integral):
                n = self.shape[axis]
                if not -n <= int(i) < n:
                    raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
                out.append(int(i) % n)
            else:
                raise TypeError(
                    f"distributed arrays take ints, slices and ..., not {type(i).__name__}"
                )
        return out

    # -- elementwise ------------------------------------------------------------------------

    def _compatible(self, other: DistArray) -> None:
        if other.targets != self.targets or not _same_layout(other.dim_data, self.dim_data):
            raise ValueError(
                "elementwise operations need operands distributed the same way "
                f"(same targets and dim_data): {self!r} vs {other!r}; redistribute() one of them"
            )

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__":
            return NotImplemented
        operands: list[Any] = []
        for x in inputs:
            if isinstance(x, DistArray):
                self._compatible(x)
                operands.append(engine.Ref(x.key))
            elif isinstance(x, numbers.Number) or (
                isinstance(x, np.ndarray | np.generic) and np.ndim(x) == 0
            ):
                operands.append(x)
            else:
                return NotImplemented
        out = kwargs.pop("out", None)
        if out is not None:
            target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
            if not isinstance(target, DistArray) or ufunc.nout != 1:
                return NotImplemented
            self._compatible(target)
            kwargs["out"] = engine.Ref(target.key)
            self._on_all(engine.elementwise, None, ufunc, operands, kwargs)
            return target
        if ufunc.nout == 1:
            key = new_key()
            dtypes = self._on_all(engine.elementwise, key, ufunc, operands, kwargs)
            return self._like(key, dtypes[0])
        keys = [new_key() for _ in range(ufunc.nout)]  # divmod, modf, frexp: one each
        dtypes = self._on_all(engine.elementwise, keys, ufunc, operands, kwargs)
        return tuple(self._like(k, dt) for k, dt in zip(keys, dtypes[0], strict=True))

    def _like(self, key: str, dtype: Any) -> DistArray:
        """A new handle on sections ``key`` distributed as this array's."""
        return DistArray(
            self.client, key, self.targets, self.dim_data, np.dtype(dtype), self._distribution
        )

    def apply_local(self, func: Any, *args: Any) -> list[Any]:
        """``func(local_array, *args)`` on every engine's section (a stencil kernel, a local
        solver); the results by grid rank. The LocalArray's ``ndarray`` may be changed in
        place: that is how kernels update the distributed array."""
        return self._on_all(engine.call_local, self.key, func, args)

    def astype(self, dtype: Any) -> DistArray:
        key = new_key()
        self._on_all(engine.astype, self.key, key, np.dtype(dtype).str)
        return self._like(key, dtype)

    def copy(self) -> DistArray:
        key = new_key()
        self._on_all(engine.copy, self.key, key)
        return self._like(key, self.dtype)

    # -- engine to engine -------------------------------------------------------------------

    def _collective(self, f: Any, *args: Any) -> list[Any]:
        """``f(key, comm_key, *args)`` on every target, over the targets' communicator."""
        from .commlink import with_communicator

        return with_communicator(
            self.client, self.targets, lambda comm: self._on_all(f, self.key, comm, *args)
        )

    def _coords(self) -> list[tuple[int, ...]]:
        d = self.distribution
        return [d.coords(r) for r in range(d.nprocs)]

    def _reduce(self, op: str, axis: int | None) -> Any:
        if self.size == 0 and op != "sum":
            raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
        if axis is not None:
            if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
                raise TypeError(f"axis must be an int or None, not {type(axis).__name__}")
            if not -self.ndim <= axis < self.ndim:
                raise ValueError(f"axis {axis} is out of bounds for a {self.ndim}-d array")
            axis = int(axis) % self.ndim
        if axis is None or self.ndim == 1:  # one number, as numpy gives
            return self._collective(engine.reduce_all, op)[0]
        return self._reduce_axis(op, axis)

    def _reduce_axis(self, op: str, axis: int) -> DistArray:
        """A distributed array over the other dimensions, as enthought/distarray's
        reductions give: it lives on the grid positions at coordinate 0 along ``axis``
        (each grid line's partials meet there, engine to engine), keeps the other
        dimensions' distribution and grid, without padding."""
        coords = self._coords()
        result_dim_data: list[tuple[dict[str, Any], ...] | None] = [
            tuple(owned_dim_dict(m) for i, m in enumerate(maps) if i != axis)
            if coords[rank][axis] == 0
            else None
            for rank, maps in enumerate(self.distribution.local_maps)
        ]
        key = new_key()
        dtypes = self._collective(engine.reduce_axis, op, axis, coords, key, result_dim_data)
        roots = [r for r, dd in enumerate(result_dim_data) if dd is not None]
        return DistArray(
            self.client,
            key,
            [self.targets[r] for r in roots],
            [result_dim_data[r] for r in roots],  # type: ignore[misc]
            np.dtype(dtypes[roots[0]]),
        )

    @staticmethod
    def _plain_reduction(name: str, dtype: Any, out: Any, extra: dict[str, Any]) -> None:
        """numpy's ``np.sum(da)`` calls ``da.sum(axis=, dtype=, out=)``: the defaults work,
        anything else is refused by name rather than ignored."""
        given = [k for k, v in (("dtype", dtype), ("out", out)) if v is not None] + sorted(extra)
        if given:
            raise TypeError(f"DistArray.{name}() does not take {', '.join(given)}")

    def sum(self, axis: int | None = None, dtype: Any = None, out: Any = None, **kw: Any) -> Any:
        """Sum over every cell (a scalar) or along one axis (a DistArray over the other
        dimensions; a scalar for a 1-d array); partial sums meet engine to engine."""
        self._plain_reduction("sum", dtype, out, kw)
        return self._reduce("sum", axis)

    def min(self, axis: int | None = None, out: Any = None, **kw: Any) -> Any:
        self._plain_reduction("min", None, out, kw)
        return self._reduce("min", axis)

    def max(self, axis: int | None = None, out: Any = None, **kw: Any) -> Any:
        self._plain_reduction("max", None, out, kw)
        return self._reduce("max", axis)

    def mean(self, axis: int | None = None, dtype: Any = None, out: Any = None, **kw: Any) -> Any:
        self._plain_reduction("mean", dtype, out, kw)
        n = self.size if axis is None else self.shape[axis]
        total = self._reduce("sum", axis)
        return total / n if n else total * np.nan

    def exchange_halos(self) -> None:
        """Fill the padding of padded block dimensions from the neighbours' cells, engine
        to engine (periodic dimensions wrap, other boundary padding is left alone)."""
        paddings = [
            [getattr(m, "padding", (0, 0)) for m in ax.maps] for ax in self.distribution.axes
        ]
        if any(p != (0, 0) for per_axis in paddings for p in per_axis):
            self._collective(engine.exchange_halos, self._coords(), paddings)

    def redistribute(
        self,
        dist: Any = None,
        grid_shape: Sequence[int] | None = None,
        padding: Any = None,
        periodic: Any = None,
    ) -> DistArray:
        """The same values under another distribution on the same targets: every engine
        sends each other engine the cells it will own, in one all-to-all."""
        _, per_rank = plan(self.shape, dist, grid_shape, padding, periodic, len(self.targets))
        key = new_key()
        self._collective(engine.redistribute, key, per_rank)
        return DistArray(self.client, key, self.targets, per_rank, self.dtype)
