"""Client side of the communicator: ``DirectView.communicator()`` asks every engine of the
view to join, ranks in the view's order, and returns once every peer link is open."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from zpar.comm.bootstrap import join
from zpar.constants import COLL_MAXLINEAR, COLL_XSIZE, PK_ACKMARK, PK_HIWATER, PK_MAXDATALEN

#: the parameters a communicator accepts, with their defaults (IMPI's negotiated values)
PARAMS = {
    "coll_xsize": COLL_XSIZE,
    "coll_maxlinear": COLL_MAXLINEAR,
    "ackmark": PK_ACKMARK,
    "hiwater": PK_HIWATER,
    "maxdatalen": PK_MAXDATALEN,
    "shm": 1,  #: long messages between processes of one host through shared memory
}


@dataclass(frozen=True)
class CommunicatorInfo:
    """What the client knows of a communicator it created."""

    name: str
    comm_id: str
    engine_ids: list[int]  #: engine id of each rank
    hostnames: list[str]  #: hostname of each rank
    params: dict[str, int]

    @property
    def size(self) -> int:
        return len(self.engine_ids)


def create(
    view: Any,
    name: str = "comm",
    auth: str = "key",
    hosts: Any = None,
    *,
    timeout: float = 60.0,
    **params: int,
) -> CommunicatorInfo:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ValueError(f"name must be a Python identifier (the engines' variable), got {name!r}")
    unknown = set(params) - set(PARAMS)
    if unknown:
        raise TypeError(
            f"unknown communicator parameter(s) {sorted(unknown)}; known: {sorted(PARAMS)}"
        )
    full = {k: int(params.get(k, v)) for k, v in PARAMS.items()}
    ids = view._ids()
    if not ids:
        raise ValueError("communicator over no engines")
    if len(set(ids)) != len(ids):
        raise ValueError(f"an engine appears twice in the view: {ids}")
    if hosts not in (None, "engine") and (
        not isinstance(hosts, (list, tuple)) or len(hosts) != len(ids)
    ):
        raise ValueError(
            f'hosts must be None, "engine" or a list of {len(ids)} labels, got {hosts!r}'
        )
    comm_id = f"{name}-{uuid.uuid4().hex[:16]}"
    size = len(ids)
    client = view.client
    ars = [
        client[eid].apply_async(
            join,
            comm_id,
            rank,
            size,
            name=name,
            auth=auth,
            hosts=hosts,
            timeout=timeout,
            params=full,
        )
        for rank, eid in enumerate(ids)
    ]
    results = [ar.get(timeout=timeout + 30) for ar in ars]
    return CommunicatorInfo(name, comm_id, ids, [r["hostname"] for r in results], full)
