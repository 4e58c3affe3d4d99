"""MemoryStore: records in a dict, for throwaway clusters (``--db memory``), with record
and size limits."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..records import jsonable
from .base import JSON_KEYS, OPERATORS, TaskStore


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
            row = {k: jsonable(v) if k in JSON_KEYS else v for k, v in row.items()}
            old = self.rows.get(row["msg_id"])
            if old is None:
                self.rows[row["msg_id"]] = dict(row)
            else:
                old.update(row)
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
                del self.rows[msg_id]
                self.size -= sum(map(len, self.buffers.pop(msg_id, ())))

    def get(self, msg_ids: Iterable[str], with_buffers: bool) -> dict[str, dict[str, Any]]:
        out = {}
        for m in msg_ids:
            row = self.rows.get(m)
            if row is not None:
                out[m] = dict(row, buffers=self.buffers.get(m, [])) if with_buffers else row
        return out

    def find(self, query: dict[str, Any], keys: list[str]) -> list[dict[str, Any]]:
        out = []
        for row in sorted(self.rows.values(), key=lambda r: r.get("submitted") or 0):
            if all(_match(row.get(k), cond) for k, cond in query.items()):
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
            del self.rows[m]
            self.size -= sum(map(len, self.buffers.pop(m, ())))
        return len(doomed)

    def history(self) -> list[str]:
        return [m for m, _ in sorted(self.rows.items(), key=lambda kv: kv[1].get("submitted") or 0)]

    def mark_lost(self, now: float) -> int:
        return 0  # a new memory store has no past

    def count(self) -> int:
        return len(self.rows)


def _match(value: Any, cond: dict[str, Any]) -> bool:
    for op, arg in cond.items():
        try:
            if not OPERATORS[op](value, arg):
                return False
        except TypeError:  # None < 3 and the like: no match, as in a database
            return False
    return True
