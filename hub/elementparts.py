"""The hub's record of a load-balanced map's element request, as its parts arrive.

An element request (zpar.elements) carries a run of a map's elements, each a task for its
user (``<msg_id>#<pos>``, zpar.elements.element_id). The hub keeps no record per element:
it keeps the request's record, and one *part row* per part the scheduler reports (an
apply_reply answering a run of elements: their values as one list, errors by position,
where and when it ran), with that part's result buffers. The request's row carries the
parts' summary (``Elements.summary``); db queries, get_result, hub_history and resubmit
expand it into element records when asked (hub/elementquery.py). So a map of a million
elements costs the controller one record while it runs, a byte per element to count what
is answered, and a few rows per thousand elements in the store.

Rows, in the store's one table:

    <msg_id>       queue MAP_QUEUE   the request: header, label, submitted, its request's
                                     bytes (resubmit); result_content = the summary
    <msg_id>#p<k>  queue PART_QUEUE  its k-th part: engine_uuid, started, completed,
                                     status, result_content (errors), stdout, stderr, buffers

A request answered by one part, the common case (a map's run of elements on one engine
answered at once), has no part row: the part's metadata and content are the summary's
``INLINE``, its stdout, stderr, result_size and buffers the request row's own (unused
otherwise). That halves the rows a map writes (docs/decisions.md, "A map's elements are
records").
"""

from __future__ import annotations

from typing import Any

from zpar.elements import ELEMENTS, ERRORS, PART_SEP, RETRYING, element_range

#: ``queue`` of an element request's row (its records are its elements', not its own)
MAP_QUEUE = "map"
#: ``queue`` of a part's row
PART_QUEUE = "part"
#: the summary's key in a request row's result_content: [part, ...] (SUMMARY_FIELDS)
PARTS = "parts"
#: a part in the summary: [lo, hi, engine_uuid, started, completed, status, received,
#: [positions that failed], [positions placed again (not answered by this part)]]
SUMMARY_FIELDS = (
    "lo",
    "hi",
    "engine_uuid",
    "started",
    "completed",
    "status",
    "received",
    "errors",
    "retrying",
)
#: the summary's key for resubmitted elements: {position (str): new element msg_id}
RESUBMITTED = "resubmitted"
#: the summary's key for the only part of a request answered at once: {"metadata": ...,
#: "result_content": ...} of that part, which has no row of its own
INLINE = "inline"


def part_row_id(origin: str, k: int) -> str:
    """The row id of the k-th part of request ``origin``."""
    return f"{origin}{PART_SEP}p{k}"


def is_part_row(msg_id: str) -> bool:
    i = msg_id.rfind(PART_SEP)
    return i > 0 and msg_id[i + 1 : i + 2] == "p"


class Elements:
    """What the hub keeps of one element request while it runs: its positions, the parts
    received (their summaries) and which positions are answered (one byte each)."""

    __slots__ = ("lo", "hi", "parts", "answered", "left", "resubmitted", "inline")

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.hi = hi
        self.parts: list[list[Any]] = []
        self.answered = bytearray(hi - lo)
        self.left = hi - lo
        self.resubmitted: dict[str, str] = {}
        #: the only part's metadata and content, when it answered every element (INLINE)
        self.inline: dict[str, Any] | None = None

    @classmethod
    def of(cls, metadata: dict[str, Any] | None) -> Elements | None:
        """The element positions a request's metadata names, None for any other request."""
        if not metadata:
            return None
        rng = element_range(metadata.get(ELEMENTS))
        return None if rng is None else cls(*rng)

    def add(
        self,
        engine_uuid: str | None,
        metadata: dict[str, Any],
        content: dict[str, Any] | None,
        started: float | None,
        completed: float | None,
        status: str,
        received: float | None,
    ) -> int:
        """Take a part (a reply without ``elements``: every position not answered yet);
        returns its index k (its row is part_row_id(origin, k))."""
        content = content or {}
        rng = element_range(content.get(ELEMENTS))
        lo, hi = self.lo, self.hi
        a, b = (lo, hi) if rng is None else (max(lo, min(rng[0], hi)), max(lo, min(rng[1], hi)))
        errors = content.get(ERRORS)
        failed = sorted(int(k) for k in errors if str(k).isdigit()) if type(errors) is dict else []
        retrying = metadata.get(RETRYING)
        again = sorted(p for p in retrying if type(p) is int) if type(retrying) is list else []
        answered = self.answered
        if rng is None:  # a whole-run answer (aborted, its engine died): what is left
            fresh = answered.count(0)
            answered[:] = b"\x01" * len(answered)
        else:
            seg = answered[a - lo : b - lo]
            fresh = seg.count(0)
            answered[a - lo : b - lo] = b"\x01" * (b - a)
            for p in again:  # placed again: answered by a later part
                if a <= p < b:
                    answered[p - lo] = 0
                    fresh -= 1
        self.left -= fresh
        self.parts.append([a, b, engine_uuid, started, completed, status, received, failed, again])
        return len(self.parts) - 1

    @property
    def done(self) -> bool:
        return self.left <= 0

    def summary(self, status: str | None) -> dict[str, Any]:
        """The request row's result_content."""
        out: dict[str, Any] = {"status": status, ELEMENTS: [self.lo, self.hi], PARTS: self.parts}
        if self.resubmitted:
            out[RESUBMITTED] = self.resubmitted
        if self.inline is not None:
            out[INLINE] = self.inline
        return out

    def outcome(self) -> tuple[float | None, float | None, str]:
        """(first started, last completed, status) of the whole request: "ok", or the first
        part's status that is not, or "error" if an element failed."""
        started = [p[3] for p in self.parts if p[3] is not None]
        completed = [p[4] for p in self.parts if p[4] is not None]
        status = "ok"
        for p in self.parts:
            if p[5] != "ok":
                status = str(p[5])
                break
            if p[7] and set(p[7]) - set(p[8]):
                status = "error"
        return (min(started) if started else None, max(completed) if completed else None, status)
