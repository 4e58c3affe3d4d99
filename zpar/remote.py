"""Small functions the client sends to engines by reference (they import zpar too)."""

from __future__ import annotations

from typing import Any


def map_chunk(f: Any, *seqs: Any) -> list[Any]:
    """Run one chunk of a map on an engine."""
    return list(map(f, *seqs))
