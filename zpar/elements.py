"""Element requests: a load-balanced map's elements, several to a request, each a task.

ipyparallel's load-balanced map sends one task per element (chunksize=1), and its users
see that: results stream in as elements finish, a slow element holds back no other engine,
progress and abort move per element. zpar keeps what they see and sends fewer messages:
one apply_request carries the function and a contiguous run of elements, and says so in
its metadata (``elements: [lo, hi]``, positions in its payload). Its engine runs them one
at a time and answers in *parts*: one apply_reply per run of finished elements
(``elements: [a, b]`` in the content, their values pickled as one list, the failed ones'
errors under ``errors`` by position), sent as elements finish within the engine's bound
on held replies, the last part marked ``final``. The task scheduler may take the
unstarted tail of a running request back (revoke_request ``tails``) and place it on an
idle engine as a request of its own, under a *part id* ``<msg_id>#<lo>.<n>``; the client
routes any reply whose parent is a part id to the request it came from
(docs/decisions.md, "A load-balanced map, one task per element"). Each element is a task
for its user under an *element id* ``<msg_id>#<pos>`` (``ar.msg_ids``): the hub records
the request and its parts, and answers queries, get_result and resubmit per element
(hub/elementquery.py).

Every process reads these names from here.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import struct
import sys
from array import array
from typing import Any

#: metadata of a request, content of a reply: the positions [lo, hi) it covers
ELEMENTS = "elements"
#: content of a part: {position (str): error content} of the elements that raised
ERRORS = "errors"
#: content of a part: the last part of the placement it answers
FINAL = "final"
#: metadata of a part, added by the task scheduler: positions whose error is not their
#: answer (the request has retries left: each is placed again on its own)
RETRYING = "retrying"
#: revoke_request / revoke_reply content: {part id: elements to keep} / {part id: [a, b]}
TAILS = "tails"
#: metadata of a part: when each of its elements ran, in bytes: a width byte ``w`` (1, 2,
#: 4 or 8), the little-endian float64 epoch second its first element started, then for
#: each element the microseconds it ran, as a little-endian unsigned of ``w`` bytes (the
#: narrowest that holds the longest). An element's start is the end of the one before it
#: on that engine, so the engine reads its clock once per element, and a map of quick
#: calls costs a byte per element on the wire and in the store (8 as float64s; the hub's
#: CPU per map went with it: docs/decisions.md, "A map's elements are records").
#: Element ``a + i`` of a part answering [a, b) ran from ``epoch + sum(d[:i])`` to
#: ``epoch + sum(d[:i + 1])`` µs. Parts stored before this format (float64s ``clock, t0,
#: ..., tn``, 16 + 8n bytes, never the length of this one for the same n) still read.
TIMES = "element_times"
_HEAD = struct.Struct("<Bd")
#: a part's TIMES width byte -> the array typecode of that width (native order)
_WIDTHS = {1: "B", 2: "H", 4: "I", 8: "Q"}
#: metadata of a part: {position (str): text} of its elements that wrote to stdout /
#: stderr, each element's own (ipyparallel's tasks each have their own); the part's
#: ``stdout`` / ``stderr`` hold the same text run together. Absent when none wrote.
STDOUTS = "element_stdout"
STDERRS = "element_stderr"
#: between a request's msg_id and a part's suffix (never in a Session's msg_ids)
PART_SEP = "#"


def origin_of(msg_id: str) -> str:
    """The msg_id of the request a (part) id belongs to."""
    i = msg_id.find(PART_SEP)
    return msg_id if i < 0 else msg_id[:i]


def part_id(origin: str, lo: int, n: int) -> str:
    """The id of a request's part placed on its own from position ``lo`` (``n`` makes it
    unique among the parts of that request)."""
    return f"{origin}{PART_SEP}{lo}.{n}"


def element_id(origin: str, pos: int) -> str:
    """The msg_id of element ``pos`` of request ``origin``: a task of its own for its user
    (``ar.msg_ids``, the hub's records, get_result, resubmit), never a message's."""
    return f"{origin}{PART_SEP}{pos}"


#: positions' decimal strings, kept for the first positions: element ids are made by the
#: thousand on the client's sending path (history), where str() per position shows
_POSITIONS_CACHED = 1 << 16
_positions: list[str] = []


def _position_strings(lo: int, hi: int) -> list[str]:
    global _positions
    cached = _positions
    if hi > len(cached) and len(cached) < _POSITIONS_CACHED:
        top = min(_POSITIONS_CACHED, max(hi, 2 * len(cached), 1024))
        cached = _positions = cached + [str(j) for j in range(len(cached), top)]  # swapped whole
    if hi <= len(cached):
        return cached[lo:hi]
    return cached[lo:] + [str(j) for j in range(max(lo, len(cached)), hi)]


def element_ids(origin: str, n: int, last: int | None = None) -> list[str]:
    """The element ids of positions [0, n) of request ``origin``, or of its ``last``
    positions only (a bounded history keeps no more)."""
    lo = 0 if last is None else max(0, n - last)
    prefix = origin + PART_SEP
    return [prefix + s for s in _position_strings(lo, n)]


def split_element_id(msg_id: str) -> tuple[str, int] | None:
    """(request msg_id, position) of an element_id, None for any other id."""
    i = msg_id.rfind(PART_SEP)
    if i <= 0:
        return None
    tail = msg_id[i + 1 :]
    if not tail.isdigit() or not tail.isascii():
        return None
    return msg_id[:i], int(tail)


def element_dates(times: Any, lo: int, hi: int, pos: int) -> tuple[float, float] | None:
    """(started, completed) of element ``pos`` of a part answering [lo, hi), from the
    part's TIMES (bytes, or a store's text); None when the part carries no times for it."""
    if not lo <= pos < hi:
        return None
    if isinstance(times, str):
        times = times_from_text(times)
    if not isinstance(times, bytes | bytearray | memoryview):
        return None
    decoded = _decoded(bytes(times), hi - lo)
    if decoded is None:
        return None
    epoch, offsets = decoded
    i = pos - lo
    return epoch + offsets[i], epoch + offsets[i + 1]


@functools.lru_cache(maxsize=16)
def _decoded(times: bytes, n: int) -> tuple[float, tuple[float, ...]] | None:
    """(epoch of the first start, n + 1 offsets in seconds) of a part's TIMES for n
    elements, None if they are not that; cached: a part's elements ask one after another."""
    if len(times) == 16 + 8 * n:  # float64s clock, t0 .. tn (parts stored before the width)
        ts = array("d", times)
        if sys.byteorder == "big":
            ts.byteswap()
        return 0.0, tuple(ts[0] + t for t in ts[1:])
    if len(times) < _HEAD.size:
        return None
    width, epoch = _HEAD.unpack_from(times)
    code = _WIDTHS.get(width)
    if code is None or len(times) != _HEAD.size + width * n:
        return None
    runs = array(code, times[_HEAD.size :])
    if sys.byteorder == "big":
        runs.byteswap()
    return epoch, tuple(us * 1e-6 for us in itertools.accumulate(runs, initial=0))


def times_as_text(times: bytes) -> str:
    """A part's TIMES as the hub stores them: base64, ASCII at 4/3 of the bytes (a JSON
    store escapes the latin-1 text of raw bytes to ~4 characters a byte)."""
    return binascii.b2a_base64(times, newline=False).decode("ascii")


def times_from_text(text: str) -> bytes | None:
    """A part's TIMES from a store's text: base64 (times_as_text), or latin-1 (how
    hub.records.jsonable keeps bytes: raw times of a clock in epoch seconds always hold a
    byte over 0x7f, which base64 never has); None if it is neither."""
    if text.isascii():
        try:
            return binascii.a2b_base64(text, strict_mode=True)
        except binascii.Error:
            return None
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return None


def pack_times(clock: float, start: float, ends: array) -> bytes:
    """A part's TIMES from its elements' end times ``ends`` (a float64 array, the
    engine's monotonic clock), the first one's ``start`` on that clock and ``clock``, the
    clock's offset to the epoch (pack_part_times, its end left out)."""
    return pack_part_times(clock + start, start, ends)[0]


def pack_part_times(epoch: float, start: float, ends: array) -> tuple[bytes, float]:
    """A part's TIMES, its first element started at ``start`` on the monotonic clock of
    ``ends`` and at ``epoch`` (epoch seconds), and its last element's end as element_dates
    reads it back: the next part of the run starts there (its ``epoch``), so two parts
    never overlap by a rounding or by two reads of the clock. Offsets are rounded to the µs
    from ``start`` before they are differenced, so no rounding accumulates along a part.
    A few elements in Python, more in numpy (loaded by the engine's serializer already):
    ~5 µs either way."""
    if len(ends) <= _FEW:
        us = [round((e - start) * 1e6) for e in ends]
        runs = [b - a for a, b in zip([0, *us], us, strict=False)]
        width = _width(max(runs, default=0))
        packed = array(_WIDTHS[width], runs)
        if sys.byteorder == "big":
            packed.byteswap()
        total = us[-1] if us else 0
        return _HEAD.pack(width, epoch) + packed.tobytes(), epoch + total * 1e-6
    import numpy as np

    f = np.frombuffer(ends, dtype=np.float64) - start
    f *= 1e6
    np.rint(f, out=f)
    runs = f.astype(np.int64)
    total = int(runs[-1]) if len(runs) else 0
    runs[1:] -= runs[:-1].copy()
    width = _width(int(runs.max()) if len(runs) else 0)
    packed = _HEAD.pack(width, epoch) + runs.astype(f"<u{width}").tobytes()
    return packed, epoch + total * 1e-6


#: parts of at most this many elements are packed without numpy (its calls cost more)
_FEW = 16


def _width(longest: int) -> int:
    """The bytes of the narrowest unsigned that holds ``longest`` (a monotonic clock's
    runs are never negative)."""
    return 1 if longest < 1 << 8 else 2 if longest < 1 << 16 else 4 if longest < 1 << 32 else 8


def with_own_metadata(metadata: dict[str, Any], content: dict[str, Any], pos: int) -> None:
    """Give a part's metadata, copied for its element ``pos``, that element's own
    started / completed (its part's when the part has no TIMES) and stdout / stderr
    (STDOUTS, STDERRS), without the per-element fields."""
    for stream, own in (("stdout", STDOUTS), ("stderr", STDERRS)):
        texts = metadata.pop(own, None)
        if isinstance(texts, dict):
            metadata[stream] = texts.get(str(pos), "")
    times = metadata.pop(TIMES, None)
    rng = element_range(content.get(ELEMENTS)) if times is not None else None
    dates = element_dates(times, rng[0], rng[1], pos) if rng is not None else None
    if dates is not None:
        metadata["started"], metadata["completed"] = dates


def element_range(value: Any) -> tuple[int, int] | None:
    """``[lo, hi]`` as ints with 0 <= lo <= hi, None if ``value`` is not one."""
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(type(v) is int for v in value)
        and 0 <= value[0] <= value[1]
    ):
        return value[0], value[1]
    return None
