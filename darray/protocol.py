"""The Distributed Array Protocol's rules for one export: ``validate(export) -> (ok, why)``.

Every rule the protocol (version 0.10.0, seeds/001) states about a single process's
``__distarray__()`` is checked here; the rules that need every process's export (adjacent
blocks, matching communication padding, coverage of unstructured indices) are in
``zpar.darray.consistency``. The first broken rule is reported, naming the dimension and
the key, so a foreign library's author can fix it.

Stricter than the reference validator on purpose: buffer lengths must match the dimension
dictionaries (``stop - start`` for blocks, the owned count for cyclic, ``len(indices)`` for
unstructured), integers must be Python ints (not numpy's, which are not ``int``), the
unstructured indices must be integers and locally unique, and ``size``/``stop`` bounds hold.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .maps import cyclic_owned_count

#: The protocol version our exports carry, and the one the seed specifies.
VERSION = "0.10.0"
#: Exports we read: 0.10.x (semantic versioning: patch releases only fix the text).
_SUPPORTED = re.compile(r"0\.10\.(0|[1-9]\d*)")
_SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")

Result = tuple[bool, str]
OK: Result = (True, "")


def _is_int(v: Any) -> bool:
    return type(v) is int


def _int_rule(dd: dict[str, Any], key: str, idx: int, minimum: int) -> str:
    if key not in dd:
        return f"dimension {idx}: required key {key!r} is missing"
    v = dd[key]
    if not _is_int(v):
        return f"dimension {idx}: {key!r} must be a Python int, not {type(v).__module__}.{type(v).__qualname__}"
    if v < minimum:
        return f"dimension {idx}: {key!r} is {v}, must be >= {minimum}"
    return ""


def _optional_bool_rule(dd: dict[str, Any], key: str, idx: int) -> str:
    """An optional flag (``periodic``, ``one_to_one``): absent means False, else a bool."""
    v = dd.get(key, False)
    if not isinstance(v, bool):
        return f"dimension {idx}: {key} {v!r} must be a bool"
    return ""


def _check_common(idx: int, dd: dict[str, Any]) -> str:
    if "dist_type" not in dd:
        return f"dimension {idx}: required key 'dist_type' is missing"
    if dd["dist_type"] not in ("b", "c", "u"):
        return f"dimension {idx}: dist_type {dd['dist_type']!r} is not one of 'b', 'c', 'u'"
    for key, minimum in (("size", 0), ("proc_grid_size", 1), ("proc_grid_rank", 0)):
        if why := _int_rule(dd, key, idx, minimum):
            return why
    if dd["proc_grid_rank"] >= dd["proc_grid_size"]:
        return (
            f"dimension {idx}: proc_grid_rank {dd['proc_grid_rank']} is not less than "
            f"proc_grid_size {dd['proc_grid_size']}"
        )
    return ""


def _check_block(idx: int, dd: dict[str, Any], length: int) -> str:
    for key in ("start", "stop"):
        if why := _int_rule(dd, key, idx, 0):
            return why
    start, stop, size = dd["start"], dd["stop"], dd["size"]
    if stop < start:
        return f"dimension {idx}: stop {stop} is less than start {start}"
    if stop > size:
        return f"dimension {idx}: stop {stop} is greater than size {size}"
    if dd["proc_grid_rank"] == 0 and start != 0:
        return f"dimension {idx}: start is {start} on proc_grid_rank 0, must be 0"
    if stop - start != length:
        return (
            f"dimension {idx}: stop - start is {stop - start} but the buffer's length is {length}"
        )
    padding = dd.get("padding", (0, 0))
    if not isinstance(padding, tuple):
        return (
            f"dimension {idx}: padding {padding!r} is a {type(padding).__name__}, must be a tuple"
        )
    if len(padding) != 2:
        return f"dimension {idx}: padding {padding!r} must have 2 elements"
    for v in padding:
        if not _is_int(v):
            return f"dimension {idx}: padding element {v!r} is a {type(v).__name__}, must be a Python int"
        if v < 0:
            return f"dimension {idx}: padding element {v} is negative"
    if padding[0] + padding[1] > length:
        return f"dimension {idx}: padding {padding} is wider than the buffer ({length})"
    return _optional_bool_rule(dd, "periodic", idx)


def _check_cyclic(idx: int, dd: dict[str, Any], length: int) -> str:
    if why := _int_rule(dd, "start", idx, 0):
        return why
    block_size = dd.get("block_size", 1)
    if not _is_int(block_size):
        return (
            f"dimension {idx}: 'block_size' must be a Python int, not {type(block_size).__name__}"
        )
    if block_size < 1:
        return f"dimension {idx}: block_size {block_size} is less than 1"
    rank = dd["proc_grid_rank"]
    if dd["start"] != rank * block_size:
        return (
            f"dimension {idx}: cyclic start {dd['start']} != proc_grid_rank * block_size "
            f"({rank} * {block_size})"
        )
    owned = cyclic_owned_count(dd["size"], dd["proc_grid_size"], rank, block_size)
    if owned != length:
        return f"dimension {idx}: this position owns {owned} indices but the buffer's length is {length}"
    return ""


def _check_unstructured(idx: int, dd: dict[str, Any], length: int) -> str:
    if "indices" not in dd:
        return f"dimension {idx}: required key 'indices' is missing"
    try:
        view = memoryview(dd["indices"])
    except TypeError:
        return f"dimension {idx}: indices of type {type(dd['indices']).__name__} is not a buffer"
    indices = np.asarray(view)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        return f"dimension {idx}: indices must be a 1-d buffer of integers (got {indices.dtype}, {indices.ndim}-d)"
    if len(indices) != length:
        return f"dimension {idx}: {len(indices)} indices but the buffer's length is {length}"
    if len(np.unique(indices)) != len(indices):
        return f"dimension {idx}: indices are not locally unique"
    return _optional_bool_rule(dd, "one_to_one", idx)


_BY_TYPE = {"b": _check_block, "c": _check_cyclic, "u": _check_unstructured}


def validate_dim_dict(idx: int, dd: Any, length: int) -> Result:
    """Check one dimension dictionary against a buffer of ``length`` along that dimension."""
    if not isinstance(dd, dict):
        return False, f"dimension {idx}: {type(dd).__name__} is not a dict"
    if not dd:  # the empty alias: an undistributed block
        return OK
    why = _check_common(idx, dd) or _BY_TYPE[dd["dist_type"]](idx, dd, length)
    return (False, why) if why else OK


def validate(export: Any) -> Result:
    """``(True, "")`` when ``export`` follows every single-process rule of the protocol,
    else ``(False, the first broken rule)``."""
    if not isinstance(export, dict):
        return False, f"the export is a {type(export).__name__}, not a dict"
    keys = set(export)
    expected = {"__version__", "buffer", "dim_data"}
    if keys != expected:
        missing, extra = sorted(expected - keys), sorted(map(str, keys - expected))
        return False, f"export keys: missing {missing}, extra {extra}"
    version = export["__version__"]
    if not isinstance(version, str) or not _SEMVER.fullmatch(version):
        return False, f"__version__ {version!r} is not a 'major.minor.patch' string"
    if not _SUPPORTED.fullmatch(version):
        return False, f"__version__ {version!r} is not supported (this reads 0.10.x)"
    try:
        buffer = memoryview(export["buffer"])
    except TypeError:
        return False, f"buffer of type {type(export['buffer']).__name__} has no buffer interface"
    dim_data = export["dim_data"]
    if not isinstance(dim_data, tuple):
        return False, f"dim_data is a {type(dim_data).__name__}, must be a tuple"
    if len(dim_data) != buffer.ndim:
        return False, f"len(dim_data) is {len(dim_data)} but buffer.ndim is {buffer.ndim}"
    for idx, dd in enumerate(dim_data):
        ok, why = validate_dim_dict(idx, dd, buffer.shape[idx])
        if not ok:
            return ok, why
    return OK
