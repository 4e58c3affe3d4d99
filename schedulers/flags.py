"""Reading a load-balanced request's scheduling flags (zpar.wire.messages.SchedulingFlags)."""

from __future__ import annotations

import math
from typing import Any

from zpar.dependency import Dependency

from .graph import Gate, Outcome


def parse_gates(metadata: dict[str, Any]) -> list[Gate]:
    """The after / follow gates of a request; ValueError saying what is malformed."""
    gates = []
    for key in ("after", "follow"):
        raw = metadata.get(key)
        if raw is None:
            continue
        try:
            dep = Dependency.from_wire(raw)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{key}: {e}") from None
        if dep:
            gates.append(Gate.of(dep, follow=key == "follow"))
    return gates


def parse_outcomes(metadata: dict[str, Any]) -> dict[str, Outcome]:
    raw = metadata.get("outcomes")
    if not raw:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"outcomes must be a map of msg_id to [ok, engine_uuid], got {raw!r}")
    out = {}
    for msg_id, value in raw.items():
        if not (isinstance(value, list | tuple) and len(value) == 2):
            raise ValueError(f"outcome of {msg_id!r} must be [ok, engine_uuid], got {value!r}")
        ok, uuid = value
        out[str(msg_id)] = (bool(ok), str(uuid or "").encode())
    return out


def parse_retries(metadata: dict[str, Any]) -> int:
    retries = metadata.get("retries", 0) or 0
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")
    return retries


def parse_timeout(metadata: dict[str, Any]) -> float | None:
    timeout = metadata.get("timeout")
    if timeout is None:
        return None
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return float(timeout)
