"""MemoryStore: records in a dict, for throwaway clusters (``--db memory``), with record
and size limits."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..records import jsonable
from .base import JSON_KEYS, KEPT_KEYS, REQUEST_KEY, TaskStore, matches


class MemoryStore(TaskStore):
    """Records in a dict, oldest completed culled past record_limit or size_limit bytes."""

    def __init__(self, record_limit: int = 100_000, size_limit: int = 1 << 30) -> None:
        self.url = "memory"
        self.record_limit = record_limit
        self.size_limit = size_limit
        self.rows: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.buffers: dict[str, list[bytes]] = {}
        self.size = 0

    def save(self, rows: list[dict[str, Any]], buffers: dict[str, list[bytes]]) -> None:
        for row in rows:
            row = {
                k: jsonable(v) if k in JSON_KEYS else v
                for k, v in row.items()
                if v is not None or k not in KEPT_KEYS
            }
            old = self.rows.get(row["msg_id"])
            if old is None:
                self.rows[row["msg_id"]] = row
            else:
                self.size -= len(old.get(REQUEST_KEY) or b"")
                old.update(row)
                row = old
            self.size += len(row.get(REQUEST_KEY) or b"")
        for msg_id, bufs in buffers.items():
            self.size -= sum(map(len, self.buffers.get(msg_id, ())))
            self.buffers[msg_id] = bufs
            self.size += sum(map(len, bufs))
        self._cull()

    def _cull(self) -> None:
        if len(self.rows) <= self.record_limit and self.size <= self.size_limit:
            return
        for msg_id in list(self.rows):
            if len(self.rows) <= self.record_limit and self.size <= self.size_limit:
                break
            if self.rows[msg_id].get("completed") is not None:
                self._drop(msg_id)

    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        out = {}
        for m in msg_ids:
            row = self.rows.get(m)
            if row is not None:
                row = {k: v for k, v in row.items() if k != REQUEST_KEY}
                out[m] = dict(row, buffers=self.buffers.get(m, [])) if with_buffers else row
        return out

    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        out = []
        for row in sorted(self.rows.values(), key=lambda r: r.get("submitted") or 0):
            if all(matches(row.get(k), cond) for k, cond in query.items()):
                out.append({k: row.get(k) for k in keys})
        return out

    def delete(self, msg_ids: list[str] | None, engine_uuids: list[str] | None) -> int:
        doomed = [
            m
            for m, r in self.rows.items()
            if r.get("completed") is not None
            and (msg_ids is None or m in msg_ids)
            and (engine_uuids is None or r.get("engine_uuid") in engine_uuids)
        ]
        for m in doomed:
            self._drop(m)
        return len(doomed)

    def _drop(self, msg_id: str) -> None:
        row = self.rows.pop(msg_id)
        self.size -= len(row.get(REQUEST_KEY) or b"")
        self.size -= sum(map(len, self.buffers.pop(msg_id, ())))

    def requests(self, msg_ids: Iterable[str]) -> dict[str, bytes | None]:
        return {m: self.rows[m].get(REQUEST_KEY) for m in msg_ids if m in self.rows}

    def mark_resubmitted(self, pairs: dict[str, str]) -> None:
        for old, new in pairs.items():
            if old in self.rows:
                self.rows[old]["resubmitted"] = new

    def history(self) -> list[str]:
        return [m for m, _ in sorted(self.rows.items(), key=lambda kv: kv[1].get("submitted") or 0)]

    def mark_lost(self, now: float) -> int:
        return 0  # a new memory store has no past

    def count(self) -> int:
        return len(self.rows)
