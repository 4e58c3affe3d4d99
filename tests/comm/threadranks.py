"""Run a function on N ranks, each a thread with its own peer links on loopback: the
communicator's real sockets and dance, without engines (fast enough for many sizes)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from zpar.comm.communicator import Communicator
from zpar.comm.links import PeerLinks

KEY = b"test-cluster-key"
LAST_ERRORS: list = []


def run_ranks(
    n: int,
    fn: Callable[[Communicator], Any],
    *,
    hosts: list[str] | None = None,
    timeout: float = 60.0,
    **params: Any,
) -> list[Any]:
    """fn(comm) on every rank at once; its results in rank order (exceptions re-raised)."""
    comm_id = uuid.uuid4().hex
    links = [PeerLinks(r, n, comm_id, KEY) for r in range(n)]
    table = [lk.bind() for lk in links]
    hosts = hosts or [f"h{r}" for r in range(n)]
    results: list[Any] = [None] * n
    errors: list[BaseException | None] = [None] * n

    def rank_main(r: int) -> None:
        comm = None
        try:
            links[r].dance(table, timeout)
            comm = Communicator(links[r], hosts, timeout=timeout, **params)
            results[r] = fn(comm)
            comm.Free()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors[r] = e
        finally:
            links[r].close()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)
        if t.is_alive():
            raise TimeoutError("a rank thread hung")
    LAST_ERRORS[:] = errors
    for e in errors:
        if e is not None:
            raise e
    return results
