"""One engine's section of a distributed array: a numpy buffer and its ``dim_data``.

``LocalArray.__distarray__()`` is the protocol's export (version 0.10.0): the buffer is the
numpy array itself (a PEP-3118 exporter, so importers see this memory, no copy), ``dim_data``
a tuple of dictionaries with Python ints and tuple padding, ``()`` for a 0-d array.

A section made by ``zeros``/``ones``/``full``/``empty`` starts *constant*: it holds its value
and shape, not memory (as dask's ``ones`` are broadcast views of one value). ``ndarray`` --
what kernels, halo exchanges and the export use, all of which may write or hand the memory
out -- allocates and fills the buffer on first use; read-only work (reductions, arithmetic,
indexing, gathering) reads ``values``, a stride-0 view of the one value, until then.
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

    __slots__ = ("_ndarray", "_constant", "_shape", "dim_data", "maps")

    def __init__(self, ndarray: np.ndarray, dim_data: Sequence[dict[str, Any]]) -> None:
        self._ndarray: np.ndarray | None = ndarray
        self._constant: np.ndarray | None = None
        self._shape = ndarray.shape
        self._place(dim_data)

    @classmethod
    def constant(
        cls,
        shape: tuple[int, ...],
        value: Any,
        dtype: Any,
        dim_data: Sequence[dict[str, Any]],
    ) -> LocalArray:
        """A section whose every cell is ``value`` (None: uninitialised), no memory yet.
        Only for sections without communication padding: every buffer cell is owned."""
        la = cls.__new__(cls)
        la._ndarray = None
        la._constant = (
            _Uninitialised(np.dtype(dtype)) if value is None else np.array(value, dtype=dtype)
        )
        la._shape = tuple(shape)
        la._place(dim_data)
        if la.owned_key != tuple(slice(0, n) for n in la._shape):
            raise ValueError("a constant section cannot have communication padding")
        return la

    def _place(self, dim_data: Sequence[dict[str, Any]]) -> None:
        if len(dim_data) != len(self._shape):
            raise ValueError(
                f"{len(dim_data)} dimension dictionaries for a {len(self._shape)}-d buffer"
            )
        self.maps: tuple[DimMap, ...] = tuple(
            map_from_dim_dict(dd, n) for dd, n in zip(dim_data, self._shape, strict=True)
        )
        for axis, m in enumerate(self.maps):
            if m.local_len != self._shape[axis]:
                raise ValueError(
                    f"dimension {axis}: the distribution gives {m.local_len} local indices "
                    f"but the buffer has {self._shape[axis]}"
                )
        self.dim_data = tuple(_plain(m.dim_dict()) for m in self.maps)

    # -- memory -----------------------------------------------------------------------------

    @property
    def ndarray(self) -> np.ndarray:
        """The buffer, writable; a constant section gets (and fills) its memory here."""
        if self._ndarray is None:
            from . import bufferpool

            buf = bufferpool.empty(self._shape, self.dtype)
            if not isinstance(self._constant, _Uninitialised):
                buf[...] = self._constant
            self._ndarray = buf
            self._constant = None
        return self._ndarray

    @ndarray.setter
    def ndarray(self, value: np.ndarray) -> None:
        if np.shape(value) != self._shape:
            raise ValueError(f"a section of shape {self._shape} cannot take {np.shape(value)}")
        self._ndarray = value
        self._constant = None

    @property
    def memory(self) -> np.ndarray | None:
        """The buffer if it has one (None for a constant section): never allocates."""
        return self._ndarray

    @property
    def constant_value(self) -> np.ndarray | None:
        """The one value of a constant section (a 0-d array), None once it has memory or
        when uninitialised (an ``empty`` section's cells are whatever its memory holds)."""
        c = self._constant
        return None if c is None or isinstance(c, _Uninitialised) else c

    def set_constant(self, value: np.ndarray) -> None:
        """Every cell becomes ``value`` (cast to this dtype); the memory, if any, is dropped."""
        self._constant = np.array(value, dtype=self.dtype)
        self._ndarray = None

    @property
    def values(self) -> np.ndarray:
        """The cells for reading: the buffer, or a read-only stride-0 view of the value."""
        c = self.constant_value
        if c is None:
            return self.ndarray
        return np.broadcast_to(c, self._shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._ndarray.dtype if self._ndarray is not None else self._constant.dtype  # type: ignore[union-attr]

    # -- the protocol -----------------------------------------------------------------------

    def __distarray__(self) -> dict[str, Any]:
        return {"__version__": VERSION, "buffer": self.ndarray, "dim_data": self.dim_data}

    @property
    def owned_key(self) -> tuple[slice, ...]:
        """The owned part of the buffer (communication padding left out)."""
        return tuple(m.owned_slice for m in self.maps)

    @property
    def owned(self) -> np.ndarray:
        """A writable view of the owned cells (the buffer itself for a 0-d array)."""
        return self.ndarray[self.owned_key] if self.maps else self.ndarray

    @property
    def owned_values(self) -> np.ndarray:
        """The owned cells for reading (see ``values``)."""
        return self.values[self.owned_key] if self.maps else self.values

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
        held = "" if self._ndarray is not None else ", constant"
        return (
            f"LocalArray(shape={self._shape}, dtype={self.dtype}, "
            f"grid_coords={self.grid_coords}, global_shape={self.global_shape}{held})"
        )


class _Uninitialised:
    """An ``empty`` section before its memory exists: only the dtype is known."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
