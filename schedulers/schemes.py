"""Load-balancing schemes: which of the engines with room gets the next task.

Each takes the candidate engines (all with room, in registration order) and returns one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from zpar.constants import TASK_SCHEMES


@dataclass(slots=True, eq=False)
class EngineSlot:
    """The scheduler's view of one engine."""

    id: int
    uuid: bytes
    load: int = 0  # tasks given and not yet answered
    last_given: int = 0  # dispatch counter at the last task it was given (for lru)
    tasks: set[str] = field(default_factory=set)
    joined: float = 0.0  # monotonic time the hub told us of it
    reached: bool = False  # a task was sent to it (its task connection is up)
    paused: bool = False  # told of it before its connection came up: placed nothing yet
    depth: int = 1  # tasks it may hold now: the prefetch depth, 1 while stalled
    since: float = 0.0  # monotonic time of its last reply, or of its first task after idling
    revoking: bool = False  # a revoke_request is on its way: none other until answered


def leastload(candidates: Sequence[EngineSlot]) -> EngineSlot:
    """The least loaded engine; of equally loaded ones, the one given a task longest ago
    (ipyparallel's leastload over its LRU-ordered engines): idle engines take turns, so
    tasks submitted one after another spread over them, not all to the first engine."""
    return min(candidates, key=_load_then_lru)


def lru(candidates: Sequence[EngineSlot]) -> EngineSlot:
    return min(candidates, key=_last_given)


def plainrandom(candidates: Sequence[EngineSlot]) -> EngineSlot:
    return random.choice(candidates)


def twobin(candidates: Sequence[EngineSlot]) -> EngineSlot:
    if len(candidates) < 2:
        return candidates[0]
    a, b = random.sample(list(candidates), 2)
    return a if a.load <= b.load else b


def weighted(candidates: Sequence[EngineSlot]) -> EngineSlot:
    """Two engines drawn with weights 1/(1+load), the less loaded one: idle engines are
    favoured, yet a busy one still gets work in proportion."""
    if len(candidates) < 2:
        return candidates[0]
    weights = [1.0 / (1 + e.load) for e in candidates]
    a, b = random.choices(candidates, weights, k=2)
    return a if a.load <= b.load else b


def _load_then_lru(e: EngineSlot) -> tuple[int, int]:
    return (e.load, e.last_given)


def _last_given(e: EngineSlot) -> int:
    return e.last_given


SCHEMES: dict[str, Callable[[Sequence[EngineSlot]], EngineSlot]] = {
    "leastload": leastload,
    "lru": lru,
    "plainrandom": plainrandom,
    "twobin": twobin,
    "weighted": weighted,
}
assert set(SCHEMES) == set(TASK_SCHEMES)


def get_scheme(name: str) -> Callable[[Sequence[EngineSlot]], EngineSlot]:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(
            f"unknown load-balancing scheme {name!r}; choose one of {', '.join(TASK_SCHEMES)}"
        ) from None
