"""cProfile around a process's serving loop, switched on by an environment variable.

Why: the controller and the task scheduler are started by zpar, not by the user, so the
way to profile them under a real workload (``python -m bench --only W3``) is to ask them
from the environment they inherit: ``ZPAR_PROFILE_DIR=/tmp/prof`` makes each write
``<role>-<pid>.prof`` there when its loop returns (read it with ``python -m pstats``).
Unset, it costs nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: Directory the profiles are written to; unset or empty: no profiling.
PROFILE_DIR_ENV = "ZPAR_PROFILE_DIR"


@contextlib.contextmanager
def profiled(role: str) -> Iterator[None]:
    """Profile the block when $ZPAR_PROFILE_DIR is set (``role`` names the file)."""
    where = os.environ.get(PROFILE_DIR_ENV)
    if not where:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        path = Path(where) / f"{role}-{os.getpid()}.prof"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            profile.dump_stats(path)
            log.info("profile of the %s written to %s", role, path)
        except OSError as e:
            log.warning("cannot write the %s's profile to %s: %s", role, path, e)
