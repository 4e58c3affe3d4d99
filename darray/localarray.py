"""One engine's section of a distributed array: a numpy buffer and its ``dim_data``.

``LocalArray.__distarray__()`` is the protocol's export (version 0.10.0): the buffer is the
numpy array itself (a PEP-3118 exporter, so importers see this memory, no copy), ``dim_data``
a tuple of dictionaries with Python ints and tuple padding, ``()`` for a 0-d array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .maps import DimMap, map_from_dim_dict
from .protocol import VERSION


def _plain(dd: dict[str, Any]) -> dict[str, Any]:
    """A dimension dictionary with Python ints (the protocol's ``int``) and tuple padding."""
    out: dict[str, Any] = {}
    for k, v in dd.items():
        if k == "padding":
            v = (int(v[0]), int(v[1]))
        elif k in ("periodic", "one_to_one"):
            v = bool(v)
        elif k == "indices":
            v = np.ascontiguousarray(v)
        elif k != "dist_type":
            v = int(v)
        out[k] = v
    return out


class LocalArray:
    """A numpy array plus the dimension dictionaries that place it in the global array."""

    __slots__ = ("ndarray", "dim_data", "maps")

    def __init__(self, ndarray: np.ndarray, dim_data: Sequence[dict[str, Any]]) -> None:
        if len(dim_data) != ndarray.ndim:
            raise ValueError(
                f"{len(dim_data)} dimension dictionaries for a {ndarray.ndim}-d buffer"
            )
        self.ndarray = ndarray
        self.maps: tuple[DimMap, ...] = tuple(
            map_from_dim_dict(dd, n) for dd, n in zip(dim_data, ndarray.shape, strict=True)
        )
        for axis, m in enumerate(self.maps):
            if m.local_len != ndarray.shape[axis]:
                raise ValueError(
                    f"dimension {axis}: the distribution gives {m.local_len} local indices "
                    f"but the buffer has {ndarray.shape[axis]}"
                )
        self.dim_data = tuple(_plain(m.dim_dict()) for m in self.maps)

    def __distarray__(self) -> dict[str, Any]:
        return {"__version__": VERSION, "buffer": self.ndarray, "dim_data": self.dim_data}

    @property
    def owned_key(self) -> tuple[slice, ...]:
        """The owned part of the buffer (communication padding left out)."""
        return tuple(m.owned_slice for m in self.maps)

    @property
    def owned(self) -> np.ndarray:
        """A view of the owned cells (the buffer itself for a 0-d array)."""
        return self.ndarray[self.owned_key] if self.maps else self.ndarray

    @property
    def global_shape(self) -> tuple[int, ...]:
        return tuple(m.size for m in self.maps)

    @property
    def grid_coords(self) -> tuple[int, ...]:
        return tuple(m.grid_rank for m in self.maps)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(m.grid_size for m in self.maps)

    def __repr__(self) -> str:
        return (
            f"LocalArray(shape={self.ndarray.shape}, dtype={self.ndarray.dtype}, "
            f"grid_coords={self.grid_coords}, global_shape={self.global_shape})"
        )
