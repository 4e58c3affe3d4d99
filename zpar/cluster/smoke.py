"""`zpar smoke`: is this cluster working? Wait for engines, run a job on each, check it.

The compose file's ``client`` service runs it and exits 0 only when every engine ran a task
and a load-balanced map came back right; anyone can run it against a cluster they started.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _where() -> tuple[str, int]:
    """Runs on an engine (shipped by reference: engines have zpar installed)."""
    return socket.gethostname(), os.getpid()


def smoke_test(url_file: str | Path | None, profile: str, engines: int, timeout: float) -> str:
    """Run the checks; return a one-line summary, raise ZparError (or AssertionError)."""
    from zpar.client.client import Client

    with Client(url_file=url_file, profile=profile, timeout=timeout) as rc:
        rc.wait_for_engines(engines, timeout=timeout)
        where = rc[:].apply_sync(_where)
        n = 4 * len(rc.ids)  # once: more engines may register while the map runs
        squares = rc.load_balanced_view().map_sync(lambda x: x * x, range(n))
        if squares != [x * x for x in range(n)]:
            raise AssertionError(f"wrong results from the engines: {squares}")
        hosts = sorted({h for h, _ in where})
    return (
        f"{len(where)} engines on {len(hosts)} host(s) ({', '.join(hosts)}) ran "
        f"{len(squares)} tasks correctly; client on {socket.gethostname()} pid {os.getpid()}"
    )
