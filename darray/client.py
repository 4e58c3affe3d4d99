"""The client's side of distributed arrays: ``rc.darray`` builds them, ``DistArray`` is the
handle (the data stay on the engines; target i holds grid rank i).

Constructors decide every grid position's ``dim_data`` here and send each engine only its
own; ``from_engines`` adopts any engine-side ``__distarray__`` exporter after checking that
the exports form one array.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import onengine
from .consistency import EngineExport, InconsistentExport, check_global
from .distarray import DistArray, new_key
from .layout import plan
from .maps import Distribution, owned_piece

log = logging.getLogger("zpar.darray")


def _filled_constructor(name: str, fill: Any, empty: bool, doc: str) -> Callable[..., DistArray]:
    """``zeros``, ``ones`` and ``empty``: one signature, differing only in what fills the
    sections (``empty`` leaves them uninitialised)."""

    def constructor(
        self: DarrayClient,
        shape,
        dtype=float,
        dist=None,
        grid_shape=None,
        padding=None,
        periodic=None,
        targets=None,
    ) -> DistArray:
        return self._allocate(
            shape, dtype, dist, grid_shape, padding, periodic, targets, fill, empty
        )

    constructor.__name__ = name
    constructor.__qualname__ = f"DarrayClient.{name}"
    constructor.__doc__ = doc
    return constructor


class DarrayClient:
    """``rc.darray``: constructors of distributed arrays on a client's engines."""

    def __init__(self, client: Any) -> None:
        self.client = client

    # -- layout -----------------------------------------------------------------------------

    def _plan(
        self,
        shape: int | Sequence[int],
        dist: Any,
        grid_shape: Sequence[int] | None,
        padding: Any,
        periodic: Any,
        targets: Any,
    ) -> tuple[tuple[int, ...], list[int], list[tuple[dict[str, Any], ...]]]:
        ids = self.client.sender.resolve_targets("all" if targets is None else targets)
        shape, per_rank = plan(shape, dist, grid_shape, padding, periodic, len(ids))
        return shape, ids, per_rank

    def _each(
        self, ids: Sequence[int], f: Callable[..., Any], args_of: Callable[[int], tuple]
    ) -> list[Any]:
        """Call ``f(*args_of(rank))`` on engine ``ids[rank]`` for every rank; wait for all."""
        ars = [self.client[eid].apply_async(f, *args_of(rank)) for rank, eid in enumerate(ids)]
        return [ar.get() for ar in ars]

    def _allocate(
        self, shape, dtype, dist, grid_shape, padding, periodic, targets, fill, empty
    ) -> DistArray:
        shape, ids, per_rank = self._plan(shape, dist, grid_shape, padding, periodic, targets)
        dtype = np.dtype(dtype).str
        key = new_key()
        self._each(ids, onengine.allocate, lambda r: (key, per_rank[r], dtype, fill, empty))
        return DistArray(self.client, key, ids, per_rank, np.dtype(dtype))

    # -- constructors -----------------------------------------------------------------------

    zeros = _filled_constructor("zeros", 0, False, "Zeros: each engine allocates its section.")
    ones = _filled_constructor("ones", 1, False, "Ones: each engine allocates its section.")
    empty = _filled_constructor(
        "empty", 0, True, "Uninitialised: each engine allocates its section, left as it is."
    )

    def full(
        self,
        shape,
        fill_value,
        dtype=None,
        dist=None,
        grid_shape=None,
        padding=None,
        periodic=None,
        targets=None,
    ) -> DistArray:
        dtype = np.array(fill_value).dtype if dtype is None else dtype
        return self._allocate(
            shape, dtype, dist, grid_shape, padding, periodic, targets, fill_value, False
        )

    def fromarray(
        self,
        array,
        dtype=None,
        dist=None,
        grid_shape=None,
        padding=None,
        periodic=None,
        targets=None,
    ) -> DistArray:
        """Distribute a client-side array: each engine is sent only the cells it owns."""
        array = np.asarray(array, dtype=dtype)
        shape, ids, per_rank = self._plan(array.shape, dist, grid_shape, padding, periodic, targets)
        d = Distribution(per_rank)
        key = new_key()
        dt = array.dtype.str

        def args(rank: int) -> tuple:
            return (
                key,
                per_rank[rank],
                dt,
                np.ascontiguousarray(owned_piece(array, d.local_maps[rank])),
            )

        self._each(ids, onengine.place, args)
        return DistArray(self.client, key, ids, per_rank, array.dtype, distribution=d)

    def fromfunction(
        self,
        function,
        shape,
        dtype=float,
        dist=None,
        grid_shape=None,
        padding=None,
        periodic=None,
        targets=None,
    ) -> DistArray:
        """As ``numpy.fromfunction``, evaluated on the engines over the indices they own."""
        shape, ids, per_rank = self._plan(shape, dist, grid_shape, padding, periodic, targets)
        key = new_key()
        dt = np.dtype(dtype).str
        self._each(ids, onengine.from_function, lambda r: (key, per_rank[r], dt, function))
        return DistArray(self.client, key, ids, per_rank, np.dtype(dt))

    def from_engines(self, name: str, targets: Any = None) -> DistArray:
        """Adopt the object ``name`` on each target engine (anything exporting
        ``__distarray__``): checked against the protocol and for global consistency, then
        shared (no copy) under a new key. Refusals name the engine and the broken rule."""
        ids = self.client.sender.resolve_targets("all" if targets is None else targets)
        key = new_key()
        replies = self._each(ids, onengine.adopt, lambda r: (name, key))
        try:
            for eid, (ok, why, *_rest) in zip(ids, replies, strict=True):
                if not ok:
                    raise InconsistentExport(eid, why)
            exports = [
                EngineExport(eid, dim_data, tuple(shape), dtype)
                for eid, (_ok, _why, dim_data, shape, dtype) in zip(ids, replies, strict=True)
            ]
            ordered = check_global(exports)
        except InconsistentExport:
            self.client[ids].apply_sync(onengine.free, [key])
            raise
        return DistArray(
            self.client,
            key,
            [e.engine for e in ordered],
            [e.dim_data for e in ordered],
            np.dtype(ordered[0].dtype),
        )
