"""A map chunk, run on an engine: sent by reference (engines import zpar too). Not named
zpar.remote, which is ipyparallel's decorator ``ipp.remote``."""

from __future__ import annotations

from typing import Any


def map_chunk(f: Any, *seqs: Any) -> list[Any]:
    """Run one chunk of a map on an engine."""
    return list(map(f, *seqs))
