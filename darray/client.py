"""The client's side of distributed arrays: ``rc.darray`` builds them, ``DistArray`` is the
handle (the data stay on the engines; target i holds grid rank i).

Constructors decide every grid position's ``dim_data`` here and send each engine only its
own; ``from_engines`` adopts any engine-side ``__distarray__`` exporter after checking that
the exports form one array.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, Unpack

import numpy as np

from . import engine
from .consistency import EngineExport, InconsistentExport, check_global
from .distarray import DistArray, new_key
from .layout import plan
from .maps import Distribution, owned_piece

log = logging.getLogger("zpar.darray")


class Layout(TypedDict, total=False):
    """How a constructor lays its array out over the engines, keyword-only and the same for
    every constructor (docs/darray.md): ``dist`` (None: blocks along the first dimension),
    ``grid_shape``, ``padding``, ``periodic``, ``targets`` (None: all engines)."""

    dist: Any
    grid_shape: Sequence[int] | None
    padding: Any
    periodic: Any
    targets: Any


_LAYOUT_KEYS = frozenset(Layout.__annotations__)


def _filled_constructor(name: str, fill: Any, empty: bool, doc: str) -> Callable[..., DistArray]:
    """``zeros``, ``ones`` and ``empty``: one signature, differing only in what fills the
    sections (``empty`` leaves them uninitialised)."""

    def constructor(
        self: DarrayClient, shape: Any, dtype: Any = float, **layout: Unpack[Layout]
    ) -> DistArray:
        return self._allocate(shape, dtype, layout, fill, empty)

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
        self, shape: int | Sequence[int], layout: Layout
    ) -> tuple[tuple[int, ...], list[int], list[tuple[dict[str, Any], ...]]]:
        unknown = sorted(set(layout) - _LAYOUT_KEYS)
        if unknown:
            raise TypeError(
                f"unknown layout keyword(s) {', '.join(unknown)}; a layout takes "
                f"{', '.join(sorted(_LAYOUT_KEYS))}"
            )
        targets = layout.get("targets")
        ids = self.client.sender.resolve_targets("all" if targets is None else targets)
        shape, per_rank = plan(
            shape,
            layout.get("dist"),
            layout.get("grid_shape"),
            layout.get("padding"),
            layout.get("periodic"),
            len(ids),
        )
        return shape, ids, per_rank

    def _each(
        self, ids: Sequence[int], f: Callable[..., Any], args_of: Callable[[int], tuple]
    ) -> list[Any]:
        """Call ``f(*args_of(rank))`` on engine ``ids[rank]`` for every rank; wait for all."""
        ars = [self.client[eid].apply_async(f, *args_of(rank)) for rank, eid in enumerate(ids)]
        return [ar.get() for ar in ars]

    def _allocate(
        self, shape: Any, dtype: Any, layout: Layout, fill: Any, empty: bool
    ) -> DistArray:
        shape, ids, per_rank = self._plan(shape, layout)
        dtype = np.dtype(dtype).str
        key = new_key()
        self._each(ids, engine.allocate, lambda r: (key, per_rank[r], dtype, fill, empty))
        return DistArray(self.client, key, ids, per_rank, np.dtype(dtype))

    # -- constructors -----------------------------------------------------------------------

    zeros = _filled_constructor("zeros", 0, False, "Zeros: each engine allocates its section.")
    ones = _filled_constructor("ones", 1, False, "Ones: each engine allocates its section.")
    empty = _filled_constructor(
        "empty", 0, True, "Uninitialised: each engine allocates its section, left as it is."
    )

    def full(
        self, shape: Any, fill_value: Any, dtype: Any = None, **layout: Unpack[Layout]
    ) -> DistArray:
        dtype = np.array(fill_value).dtype if dtype is None else dtype
        return self._allocate(shape, dtype, layout, fill_value, False)

    def fromarray(self, array: Any, dtype: Any = None, **layout: Unpack[Layout]) -> DistArray:
        """Distribute a client-side array: each engine is sent only the cells it owns."""
        array = np.asarray(array, dtype=dtype)
        shape, ids, per_rank = self._plan(array.shape, layout)
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

        self._each(ids, engine.place, args)
        return DistArray(self.client, key, ids, per_rank, array.dtype, distribution=d)

    def fromfunction(
        self, function: Any, shape: Any, dtype: Any = float, **layout: Unpack[Layout]
    ) -> DistArray:
        """As ``numpy.fromfunction``, evaluated on the engines over the indices they own."""
        shape, ids, per_rank = self._plan(shape, layout)
        key = new_key()
        dt = np.dtype(dtype).str
        self._each(ids, engine.from_function, lambda r: (key, per_rank[r], dt, function))
        return DistArray(self.client, key, ids, per_rank, np.dtype(dt))

    def from_engines(self, name: str, targets: Any = None) -> DistArray:
        """Adopt the object ``name`` on each target engine (anything exporting
        ``__distarray__``): checked against the protocol and for global consistency, then
        shared (no copy) under a new key. Refusals name the engine and the broken rule."""
        ids = self.client.sender.resolve_targets("all" if targets is None else targets)
        key = new_key()
        try:
            replies = self._each(ids, engine.adopt, lambda r: (name, key))
            for eid, (ok, why, *_rest) in zip(ids, replies, strict=True):
                if not ok:
                    raise InconsistentExport(eid, why)
            exports = [
                EngineExport(eid, dim_data, tuple(shape), dtype)
                for eid, (_ok, _why, dim_data, shape, dtype) in zip(ids, replies, strict=True)
            ]
            ordered = check_global(exports)
        except BaseException:  # refused, or anything else: the adopted sections go
            self.client[ids].apply_sync(engine.free, [key])
            raise
        return DistArray(
            self.client,
            key,
            [e.engine for e in ordered],
            [e.dim_data for e in ordered],
            np.dtype(ordered[0].dtype),
        )
