"""Byte layouts of typed batched calls: pure functions, no sockets.

Three layouts share one idea (seed 000): n calls of one function travel as one header of
int32 counts and one content array per primitive type, argument n of a type in call m at
``array[n * ncalls + m]``.

- zpar's ``typed_request`` / ``typed_reply``: the counts in the msgpack content, one frame
  per non-empty type array (`type_frames` / `type_arrays`).
- AMUSE's sockets channel (amuse.rfi.channel.SocketMessage): a 44-byte header of 4 flag
  bytes (big endian, error, has units, unused) and 10 native int32 (call_id, function_id,
  call_count, then the TOTAL number of values of each type in the order int32, int64,
  float32, float64, bool, string, units), then the arrays in that order: bool as one byte,
  string as int32 lengths then the NUL-terminated characters, units as float64.
- the seed's v0.2 MPI header: [function-id, ncalls, n_float64, n_int32, n_float32,
  n_string] (counts PER CALL), doubles first.

Strings are UTF-8 and their lengths count bytes: AMUSE counts characters, so it cannot send
a non-ASCII string (pinned against AMUSE in tests/typed/test_typed_amuse.py); it receives
one correctly, as it slices by the lengths it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Type names as AMUSE spells them, in the order of its sockets header and arrays.
TYPES: tuple[str, ...] = ("int32", "int64", "float32", "float64", "bool", "string")

#: numpy dtype of each type's array on the wire (native byte order; bool as one byte).
DTYPES: dict[str, np.dtype] = {
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "bool": np.dtype(np.bool_),
}

#: AMUSE's header: 4 flag bytes + 10 int32.
AMUSE_HEADER_SIZE = 44
#: Index of the units count among AMUSE's 10 header ints (after the 6 type totals).
_AMUSE_INTS = 10

#: The seed's v0.2 header types, in its order (doubles first).
V02_TYPES: tuple[str, ...] = ("float64", "int32", "float32", "string")

_NATIVE_BIG_ENDIAN = sys.byteorder == "big"


class CodecError(ValueError):
    """Bytes that do not follow the layout they were decoded as."""


# -- strings ---------------------------------------------------------------------------------


def encode_strings(strings: Sequence[str]) -> tuple[np.ndarray, bytes]:
    """int32 UTF-8 byte lengths, and the strings' bytes each followed by a NUL."""
    encoded = [s.encode("utf-8") for s in strings]
    lengths = np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded))
    return lengths, b"\0".join(encoded) + b"\0" if encoded else b""


def decode_strings(lengths: np.ndarray, data: Any) -> list[str]:
    """The strings of `encode_strings` (lengths in bytes; a NUL after each)."""
    data = bytes(data)
    n = len(lengths)
    if n == 0:
        return []
    total = int(np.asarray(lengths, dtype=np.int64).sum()) + n
    if len(data) != total or (lengths < 0).any():
        raise CodecError(f"{n} strings of {total} bytes in all expected, got {len(data)} bytes")
    try:
        if data.count(b"\0") == n:  # no NUL inside a string: one split does it
            parts = data.split(b"\0")[:n]
            if all(len(p) == k for p, k in zip(parts, lengths.tolist(), strict=True)):
                return [p.decode("utf-8") for p in parts]
        out, begin = [], 0
        for k in lengths.tolist():
            out.append(data[begin : begin + k].decode("utf-8"))
            begin += k + 1
    except UnicodeDecodeError as e:
        raise CodecError(f"a string is not UTF-8: {e}") from None
    return out


# -- columns <-> type arrays -----------------------------------------------------------------


def pack_columns(columns: Sequence[Any], dtype: str, ncalls: int) -> Any:
    """One type array from that type's argument columns (each of ncalls values, or a scalar),
    argument n of call m at [n * ncalls + m]. Strings give a list. A lone column of the
    right dtype is returned as it is (no copy)."""
    if dtype == "string":
        out: list[str] = []
        for c in columns:
            out.extend(c)
        return out
    dt = DTYPES[dtype]
    if len(columns) == 1:  # one argument of this type: its column is the array, if it fits
        c = columns[0]
        if isinstance(c, np.ndarray) and c.dtype == dt and c.ndim == 1 and len(c) == ncalls:
            return np.ascontiguousarray(c)
    arr = np.empty(len(columns) * ncalls, dtype=dt)
    for n, c in enumerate(columns):
        arr[n * ncalls : (n + 1) * ncalls] = c
    return arr


def unpack_columns(array: Any, count: int, ncalls: int) -> list[Any]:
    """The `count` columns of one type array: views, no copies."""
    if len(array) != count * ncalls:
        raise CodecError(
            f"{count} columns of {ncalls} calls need {count * ncalls} values, got {len(array)}"
        )
    return [array[n * ncalls : (n + 1) * ncalls] for n in range(count)]


def param_columns(
    arrays: dict[str, Any], counts: Sequence[int], ncalls: int, slots: Iterable[tuple[str, int]]
) -> list[Any]:
    """The column of each slot (a parameter's type, and its index among that type's
    parameters), in order: views on the type arrays, each holding counts[type] columns."""
    by_type = {
        t: unpack_columns(arrays[t], n, ncalls) for t, n in zip(TYPES, counts, strict=True) if n
    }
    return [by_type[t][i] for t, i in slots]


# -- zpar frames -----------------------------------------------------------------------------


def type_frames(arrays: dict[str, Any]) -> tuple[list[int], list[Any]]:
    """Counts per type (TYPES order) and one frame per non-empty type array.

    Numeric arrays go as memoryviews of themselves (zero copy); a string array as one frame:
    int32 byte lengths, then the NUL-terminated UTF-8 characters.
    """
    counts, frames = [], []
    for t in TYPES:
        a = arrays.get(t)
        n = 0 if a is None else len(a)
        counts.append(n)
        if not n:
            continue
        if t == "string":
            lengths, chars = encode_strings(a)
            frames.append(lengths.tobytes() + chars)
        else:
            a = np.ascontiguousarray(a, dtype=DTYPES[t])
            frames.append(memoryview(a).cast("B"))
    return counts, frames


def type_arrays(counts: Sequence[int], frames: Sequence[Any]) -> dict[str, Any]:
    """The arrays of `type_frames`: numpy views on the frames (read-only), strings a list."""
    if (
        not isinstance(counts, list | tuple)
        or len(counts) != len(TYPES)
        or any(type(c) is not int or c < 0 for c in counts)  # type(): a bool is no count
    ):
        raise CodecError(
            f"counts must be {len(TYPES)} ints >= 0 ({', '.join(TYPES)}), got {counts!r}"
        )
    expected = sum(1 for c in counts if c)
    if len(frames) != expected:
        raise CodecError(
            f"{expected} type frames expected for counts {list(counts)}, got {len(frames)}"
        )
    out: dict[str, Any] = {}
    it = iter(frames)
    for t, n in zip(TYPES, counts, strict=True):
        if not n:
            continue
        buf = next(it)
        if t == "string":
            mv = memoryview(buf).cast("B")
            if len(mv) < 4 * n:
                raise CodecError(f"string frame of {len(mv)} bytes cannot hold {n} lengths")
            lengths = np.frombuffer(mv, dtype=np.int32, count=n)
            out[t] = decode_strings(lengths, mv[4 * n :])
        else:
            dt = DTYPES[t]
            if memoryview(buf).nbytes != n * dt.itemsize:
                raise CodecError(
                    f"{t} frame: {n} values need {n * dt.itemsize} bytes, got {memoryview(buf).nbytes}"
                )
            out[t] = np.frombuffer(buf, dtype=dt)
    return out


# -- content arrays as bytes (AMUSE's body, the seed's v0.2 arrays) --------------------------


def _content_bytes(arrays: dict[str, Any], types: Sequence[str]) -> list[bytes]:
    """The non-empty arrays of `types`, in that order, as byte strings: a string array as two
    (int32 lengths, then the NUL-terminated characters), bool as one signed byte each."""
    out: list[bytes] = []
    for t in types:
        a = arrays.get(t)
        if a is None or not len(a):
            continue
        if t == "string":
            lengths, chars = encode_strings(a)
            out += [lengths.tobytes(), chars]
        elif t == "bool":
            out.append(np.asarray(a, dtype=np.int8).tobytes())
        else:
            out.append(np.ascontiguousarray(a, dtype=DTYPES[t]).tobytes())
    return out


# -- AMUSE's sockets message -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AmuseHeader:
    """AMUSE's sockets header; counts are TOTAL values per type (TYPES order)."""

    call_id: int
    function_id: int
    call_count: int
    counts: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
    units: int = 0
    error: bool = False
    big_endian: bool = _NATIVE_BIG_ENDIAN


def pack_amuse_header(h: AmuseHeader) -> bytes:
    """44 bytes: flags [big_endian, error, has units, 0], then 10 native int32."""
    if len(h.counts) != len(TYPES):
        raise CodecError(f"an AMUSE header has {len(TYPES)} type counts, got {len(h.counts)}")
    flags = bytes([int(h.big_endian), int(h.error), int(h.units > 0), 0])
    ints = np.array([h.call_id, h.function_id, h.call_count, *h.counts, h.units], dtype=np.int32)
    return flags + ints.tobytes()


def unpack_amuse_header(data: bytes) -> AmuseHeader:
    """The header of `pack_amuse_header`; refuses the other byte order, as AMUSE does."""
    if len(data) != AMUSE_HEADER_SIZE:
        raise CodecError(f"an AMUSE header is {AMUSE_HEADER_SIZE} bytes, got {len(data)}")
    big_endian = bool(data[0])
    if big_endian != _NATIVE_BIG_ENDIAN:
        raise CodecError("endianness in message does not match native endianness")
    ints = np.frombuffer(data, dtype=np.int32, count=_AMUSE_INTS, offset=4).tolist()
    if ints[2] < 0 or any(c < 0 for c in ints[3:]):
        raise CodecError(f"negative count in AMUSE header {ints}")
    return AmuseHeader(
        call_id=ints[0],
        function_id=ints[1],
        call_count=ints[2],
        counts=tuple(ints[3:9]),
        units=ints[9],
        error=bool(data[1]),
        big_endian=big_endian,
    )


def amuse_body(arrays: dict[str, Any], units: Any = ()) -> list[bytes]:
    """The byte strings that follow an AMUSE header, in its order (empty types send nothing)."""
    out = _content_bytes(arrays, TYPES)
    if len(units):
        out.append(np.asarray(units, dtype=np.float64).tobytes())
    return out


def amuse_counts(arrays: dict[str, Any]) -> tuple[int, ...]:
    return tuple(0 if arrays.get(t) is None else len(arrays[t]) for t in TYPES)


def amuse_body_sizes(h: AmuseHeader) -> list[tuple[str, int]]:
    """(what, bytes) to read after a header, in order; a string's characters are read after
    its lengths are known (size -1 here)."""
    sizes: list[tuple[str, int]] = []
    for t, n in zip(TYPES, h.counts, strict=True):
        if not n:
            continue
        if t == "string":
            sizes += [("string_lengths", 4 * n), ("string_chars", -1)]
        elif t == "bool":
            sizes.append((t, n))
        else:
            sizes.append((t, n * DTYPES[t].itemsize))
    if h.units:
        sizes.append(("units", 8 * h.units))
    return sizes


def amuse_array(what: str, data: bytes) -> np.ndarray:
    """One numeric array of an AMUSE body (bool arrives as one signed byte each)."""
    if what == "bool":
        return np.frombuffer(data, dtype=np.int8) != 0
    if what == "units":
        return np.frombuffer(data, dtype=np.float64)
    return np.frombuffer(data, dtype=DTYPES[what])


# -- the seed's v0.2 header ------------------------------------------------------------------


def pack_v02_header(function_id: int, ncalls: int, per_call: dict[str, int]) -> bytes:
    """[function-id, ncalls, n_float64, n_int32, n_float32, n_string] as native int32; the
    counts are values of each type in ONE call (the seed's table)."""
    unknown = set(per_call) - set(V02_TYPES)
    if unknown:
        raise CodecError(f"the v0.2 header has no {sorted(unknown)} (only {', '.join(V02_TYPES)})")
    ints = [function_id, ncalls, *(per_call.get(t, 0) for t in V02_TYPES)]
    return np.array(ints, dtype=np.int32).tobytes()


def unpack_v02_header(data: bytes) -> tuple[int, int, dict[str, int]]:
    """(function_id, ncalls, values per call of each type) of `pack_v02_header`."""
    if len(data) != 4 * (2 + len(V02_TYPES)):
        raise CodecError(f"a v0.2 header is {4 * (2 + len(V02_TYPES))} bytes, got {len(data)}")
    ints = np.frombuffer(data, dtype=np.int32).tolist()
    return ints[0], ints[1], dict(zip(V02_TYPES, ints[2:], strict=True))


def v02_content_arrays(arrays: dict[str, Any]) -> list[bytes]:
    """The v0.2 content arrays in the seed's order (doubles first), empty types omitted;
    strings as int32 lengths then NUL-terminated characters."""
    return _content_bytes(arrays, V02_TYPES)
