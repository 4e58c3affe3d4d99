"""A task's ``time_limit`` flag, read the same way by the client (at set_flags) and the
engine (engine.timelimit enforces it), and the error a task stopped at its limit answers."""

from __future__ import annotations

import math
from typing import Any

from .errors import TaskTimeout, error_content


def parse_time_limit(metadata: Any) -> float | None:
    """A request's ``time_limit`` in seconds (> 0, finite), None when it has none; raises
    ValueError naming a malformed one."""
    value = metadata.get("time_limit") if isinstance(metadata, dict) else None
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"time_limit must be a number of seconds > 0, got {value!r}")
    return float(value)


def timeout_content(
    msg_id: str, limit: float, engine_info: dict[str, Any], interrupted: Any = None
) -> dict[str, Any]:
    """The error content of a task stopped at its time_limit (raised as zpar.TaskTimeout),
    with the traceback of where the interrupt found it when it returned."""
    tb = interrupted.get("traceback", []) if isinstance(interrupted, dict) else []
    return error_content(
        TaskTimeout,
        f"task {msg_id} exceeded its time_limit of {limit:g} s and was interrupted",
        traceback=tb,
        engine_info=engine_info,
        zpar_error=True,
    )
