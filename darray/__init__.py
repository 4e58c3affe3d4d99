"""Distributed numpy arrays over zpar engines, speaking the Distributed Array Protocol.

Each engine holds a ``LocalArray`` (a numpy buffer and its ``dim_data``) exporting
``__distarray__``; the client holds a ``DistArray`` handle (``rc.darray.zeros(...)``).
``validate(export)`` checks one export against the protocol (version 0.10.0).
"""

from __future__ import annotations

from .consistency import InconsistentExport
from .distarray import DistArray
from .localarray import LocalArray
from .protocol import VERSION, validate

__all__ = ["VERSION", "DistArray", "InconsistentExport", "LocalArray", "validate"]
