"""A map's element records, expanded from its request's row and part rows when asked.

The store holds one row per element request and one per part (hub/elementparts.py); users
ask for elements (``ar.msg_ids``: ``<msg_id>#<pos>``) as ipyparallel's hub holds them, one
record per task. The queries of hub/queries.py and hub/resubmit.py go through here: rows
of other tasks pass unchanged, element requests come out as their elements' records (a
request's own id, named in a query, selects its elements), part rows never come out. Work is per element only for the requests a query selects.

An element's record: its request's ``session``, ``client``, ``msg_type``, ``submitted``,
``label``, ``header`` (its own ``msg_id``) and ``metadata`` (and the part's, for a result);
its part's ``engine_uuid``, ``started``, ``completed``, ``received``; ``status`` "error"
if it raised, else its part's; ``result_content`` its error, or the part's for a part
that failed as a whole, else ``{"status": "ok"}``; the part's ``stdout`` / ``stderr`` on
the part's last element (the output of a part is not split by element). Elements left
unanswered by a request that ended (a controller restart, a scheduler lost) take its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from zpar.elements import (
    ELEMENTS,
    ERRORS,
    FINAL,
    STDERRS,
    STDOUTS,
    TIMES,
    element_dates,
    element_id,
    element_range,
    origin_of,
    split_element_id,
)
from zpar.errors import HubRefused, error_content

from .elementparts import (
    INLINE,
    MAP_QUEUE,
    PART_QUEUE,
    PARTS,
    RESUBMITTED,
    is_part_row,
    part_row_id,
)
from .stores import TaskStore
from .stores.base import RECORD_KEYS, matches

#: Record keys an element shares with its request: a store query on them selects the
#: requests whose elements all match
SHARED_KEYS = frozenset({"session", "client", "msg_type", "submitted", "label"})
#: Record keys an element takes from its part's row (read only when asked or filtered on):
#: its own dates among them, in the part's metadata (zpar.elements.TIMES); without the
#: row, an element has its part's
PART_KEYS = frozenset(
    {"metadata", "result_content", "stdout", "stderr", "result_size", "started", "completed"}
)
#: What of a request row building its elements needs
_REQUEST_KEYS = [
    "msg_id",
    *sorted(SHARED_KEYS),
    "header",
    "metadata",
    "result_content",
    "retries",
    "completed",
    "status",
    # a request's only part's, when it has no row of its own (INLINE)
    "stdout",
    "stderr",
    "result_size",
]
_HIDDEN = (MAP_QUEUE, PART_QUEUE)


def find(store: TaskStore, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
    """store.find(query, keys) with element requests as their elements' records."""
    extra = [k for k in ("queue", "submitted") if k not in keys]
    plain = [r for r in store.find(query, [*keys, *extra]) if r.get("queue") not in _HIDDEN]
    wanted = {k: c for k, c in query.items() if k in SHARED_KEYS}
    wanted["queue"] = {"$eq": MAP_QUEUE}
    named = _named(query.get("msg_id"))
    if named is not None:  # msg_ids named: their requests only
        wanted["msg_id"] = {"$in": sorted({origin_of(m) for m in named})}
    requests = store.find(wanted, _REQUEST_KEYS)
    if not requests:
        return _strip(plain, extra)
    need_parts = bool(PART_KEYS.intersection(keys) or PART_KEYS.intersection(query))
    # a request's own id, named, selects its elements (the dashboard's feed names requests)
    rest = {k: c for k, c in query.items() if k != "msg_id" or named is None}
    elements = []
    for row in requests:
        parts = _part_rows(store, row, with_buffers=False) if need_parts else None
        whole = named is not None and row["msg_id"] in named
        for rec in expand(row, parts):
            if named is not None and not whole and rec["msg_id"] not in named:
                continue
            if all(matches(rec.get(k), cond) for k, cond in rest.items()):
                elements.append({k: rec.get(k) for k in (*keys, *extra)})
    merged = sorted([*plain, *elements], key=lambda r: r.get("submitted") or 0)
    return _strip(merged, extra)


def _strip(rows: list[dict[str, Any]], extra: list[str]) -> list[dict[str, Any]]:
    if extra:
        for r in rows:
            for k in extra:
                r.pop(k, None)
    return rows


def _named(cond: Any) -> set[str] | None:
    """The msg_ids a msg_id condition of only $eq / $in names (None: another condition)."""
    if not isinstance(cond, dict) or not cond or set(cond) - {"$eq", "$in"}:
        return None
    ids: list[Any] = []
    if "$eq" in cond:
        ids.append(cond["$eq"])
    ids.extend(cond.get("$in") or ())
    return {m for m in ids if isinstance(m, str)}


def history(store: TaskStore) -> list[str]:
    """store.history() with each element request as its elements' ids, parts left out."""
    ranges = {}
    for row in store.find({"queue": {"$eq": MAP_QUEUE}}, ["msg_id", "metadata"]):
        rng = element_range((row.get("metadata") or {}).get(ELEMENTS))
        ranges[row["msg_id"]] = rng or (0, 0)
    if not ranges:
        return store.history()
    out: list[str] = []
    for m in store.history():
        rng = ranges.get(m)
        if rng is not None:
            out.extend(element_id(m, j) for j in range(*rng))
        elif not is_part_row(m):
            out.append(m)
    return out


def get(store: TaskStore, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
    """store.get() that also knows element ids: an element's record carries its part's
    buffers and ``elements`` [a, b], the positions of the part's list of values (the
    client takes its own from it); the elements of one part share one buffers list."""
    ids = list(msg_ids)
    by_origin: dict[str, list[tuple[str, int]]] = {}
    plain = []
    for m in ids:
        split = split_element_id(m)
        if split is None:
            plain.append(m)
        else:
            by_origin.setdefault(split[0], []).append((m, split[1]))
    out = store.get(plain, with_buffers) if plain else {}
    for m, row in out.items():
        if row.get("queue") == MAP_QUEUE:  # a map's request: its results are its elements'
            rng = element_range((row.get("metadata") or {}).get(ELEMENTS)) or (0, 0)
            row["result_content"] = error_content(
                HubRefused,
                f"{m} is a load-balanced map's request: its results are its elements' "
                f"({element_id(m, rng[0])} to {element_id(m, max(rng[0], rng[1] - 1))}, the "
                "map's ar.msg_ids)",
            )
            row["buffers"] = []
    if not by_origin:
        return out
    requests = store.get(list(by_origin), with_buffers)  # a request's only part's (INLINE)
    for origin, wanted in by_origin.items():
        row = requests.get(origin)
        if row is None or row.get("queue") != MAP_QUEUE:
            continue
        parts = _part_rows(store, row, with_buffers)
        positions = {j for _, j in wanted}
        records = {rec["_pos"]: rec for rec in expand(row, parts, positions, keep_part=True)}
        for m, j in wanted:
            rec = records.get(j)
            if rec is None:
                continue
            part = rec.pop("_part")
            rec.pop("_pos")
            if with_buffers:
                rec["buffers"] = part.get("buffers", []) if part else []
            rec[ELEMENTS] = [part["_lo"], part["_hi"]] if part else None
            out[m] = rec
    return out


def _part_rows(store: TaskStore, row: dict[str, Any], with_buffers: bool) -> list[Any]:
    """The part rows of a request row, by index (None for one the store lost); the only
    part of a request answered at once is read from the request's own row (INLINE)."""
    summary = row.get("result_content") or {}
    parts = summary.get(PARTS) or []
    inline = summary.get(INLINE)
    if isinstance(inline, dict) and len(parts) == 1:
        part = {k: row.get(k) for k in ("stdout", "stderr", "result_size")}
        part["metadata"] = inline.get("metadata")
        part["result_content"] = inline.get("result_content")
        if with_buffers:
            if "buffers" not in row:
                row = store.get([row["msg_id"]], True).get(row["msg_id"]) or {}
            part["buffers"] = row.get("buffers") or []
        return [part]
    ids = [part_row_id(row["msg_id"], k) for k in range(len(parts))]
    found = store.get(ids, with_buffers) if ids else {}
    return [found.get(m) for m in ids]


def expand(
    row: dict[str, Any],
    part_rows: list[Any] | None = None,
    positions: set[int] | None = None,
    keep_part: bool = False,
) -> Iterator[dict[str, Any]]:
    """The element records of a request row (``positions``: only those), every key of
    RECORD_KEYS; with ``part_rows``, the keys an element takes from its part's row."""
    summary = row.get("result_content") or {}
    rng = element_range(summary.get(ELEMENTS)) or element_range(
        (row.get("metadata") or {}).get(ELEMENTS)
    )
    if rng is None:
        return
    lo, hi = rng
    parts = summary.get(PARTS) or []
    owner = _owners(lo, hi, parts)
    origin = row["msg_id"]
    header = row.get("header") or {}
    request_md = {k: v for k, v in (row.get("metadata") or {}).items() if k != ELEMENTS}
    resubmitted = summary.get(RESUBMITTED) or {}
    base = {k: row.get(k) for k in SHARED_KEYS}
    base["queue"] = "task"
    base["retries"] = row.get("retries") or 0
    for pos in range(lo, hi) if positions is None else sorted(positions):
        if not lo <= pos < hi:
            continue
        eid = element_id(origin, pos)
        rec = dict.fromkeys(RECORD_KEYS)
        rec.update(base)
        rec["msg_id"] = eid
        rec["header"] = {**header, "msg_id": eid} if header else {}
        rec["metadata"] = request_md
        rec["resubmitted"] = resubmitted.get(str(pos))
        rec["stdout"] = rec["stderr"] = ""
        k = owner[pos - lo]
        part_row = None
        if k < 0:  # unanswered: pending, or its request ended without it
            rec["completed"] = row.get("completed")
            done = row.get("status")
            rec["status"] = None if done is None else ("ok" if done == "ok" else done)
        else:
            p = parts[k]
            failed = pos in p[7]
            rec["engine_uuid"], rec["started"], rec["completed"] = p[2], p[3], p[4]
            rec["received"] = p[6]
            rec["status"] = "error" if failed else p[5]
            if part_rows is not None and k < len(part_rows):
                part_row = part_rows[k]
            if part_row is not None:
                _from_part(rec, part_row, p, pos, failed)
        if keep_part:
            rec["_pos"] = pos
            rec["_part"] = (
                None if part_row is None else {**part_row, "_lo": parts[k][0], "_hi": parts[k][1]}
            )
        yield rec


def _from_part(
    rec: dict[str, Any], part: dict[str, Any], p: list[Any], pos: int, failed: bool
) -> None:
    content = part.get("result_content") or {}
    if failed:
        error = (content.get(ERRORS) or {}).get(str(pos))
        rec["result_content"] = error if isinstance(error, dict) else {"status": "error"}
    elif p[5] != "ok":
        rec["result_content"] = {k: v for k, v in content.items() if k not in (ELEMENTS, FINAL)}
    else:
        rec["result_content"] = {"status": "ok"}
    md = part.get("metadata") or {}
    dates = element_dates(md.get(TIMES), p[0], p[1], pos)
    if dates is not None:
        rec["started"], rec["completed"] = dates
    own = {stream: md.get(key) for stream, key in (("stdout", STDOUTS), ("stderr", STDERRS))}
    md = {k: v for k, v in md.items() if k not in (TIMES, STDOUTS, STDERRS)}
    rec["metadata"] = {**rec["metadata"], **md, "status": rec["status"]}
    rec["result_size"] = part.get("result_size")
    for stream, texts in own.items():
        if isinstance(texts, dict):  # each element's own text (zpar.elements.STDOUTS)
            rec[stream] = str(texts.get(str(pos), ""))
        elif pos == p[1] - 1:  # text no element claimed: on the part's last element
            rec[stream] = part.get(stream) or ""


def _owners(lo: int, hi: int, parts: list[Any]) -> list[int]:
    """For each position, the index of the part that answers it (-1: none yet): the first
    to answer it, unless that part placed it again (a later one answers it then)."""
    owner = [-1] * (hi - lo)
    again: set[int] = set()
    for k, p in enumerate(parts):
        a, b = max(lo, p[0]), min(hi, p[1])
        retry = set(p[8] or ())
        if not again and not retry and owner[a - lo : b - lo].count(-1) == b - a:
            owner[a - lo : b - lo] = [k] * (b - a)  # the common case: a fresh run
            continue
        for pos in range(a, b):
            i = pos - lo
            if owner[i] < 0 or i in again:
                owner[i] = k
                if pos in retry:
                    again.add(i)
                else:
                    again.discard(i)
    return owner


def purge_ids(store: TaskStore, msg_ids: list[str]) -> list[str] | str:
    """The row ids a purge of ``msg_ids`` deletes: an element request with its part rows,
    when all its elements (or its own id) are named; what is wrong otherwise (a part of a
    map's elements: they are purged together)."""
    by_origin: dict[str, set[int]] = {}
    plain = []
    for m in msg_ids:
        split = split_element_id(m)
        if split is None:
            plain.append(m)
        else:
            by_origin.setdefault(split[0], set()).add(split[1])
    rows = store.get([*plain, *by_origin], with_buffers=False)
    out: list[str] = []
    for m in plain:
        out.append(m)
        row = rows.get(m)
        if row is not None and row.get("queue") == MAP_QUEUE:
            out.extend(_part_ids(row))
    for origin, positions in by_origin.items():
        row = rows.get(origin)
        if row is None or row.get("queue") != MAP_QUEUE:
            out.extend(element_id(origin, j) for j in positions)  # unknown: said so
            continue
        rng = element_range((row.get("metadata") or {}).get(ELEMENTS)) or (0, 0)
        if positions != set(range(*rng)) and origin not in plain:
            return (
                f"cannot purge {len(positions)} of the {rng[1] - rng[0]} elements of map "
                f"request {origin}: a map's elements are purged together (give all of its "
                "msg_ids, or its AsyncMapResult)"
            )
        if origin not in plain:
            out.append(origin)
            out.extend(_part_ids(row))
    return list(dict.fromkeys(out))


def _part_ids(row: dict[str, Any]) -> list[str]:
    summary = row.get("result_content") or {}
    parts = summary.get(PARTS) or []
    if isinstance(summary.get(INLINE), dict) and len(parts) == 1:
        return []  # its only part is in its own row
    return [part_row_id(row["msg_id"], k) for k in range(len(parts))]
