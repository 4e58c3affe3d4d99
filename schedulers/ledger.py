"""Per-client dispatch limits: the hook the task book asks before giving a client's task
to an engine.

The book calls ``admit(client)`` before it places a task of ``client``; a task refused
waits, held for that client alone (other clients' tasks go on), until ``answered(client)``
reports one of that client's placed tasks answered. ``placed`` and ``answered`` are called
exactly once per placement that reached the book's count and per such task's answer,
unless the ledger says it counts nothing (``counts_tasks = False``: two calls per task saved on
the scheduler's hot path).
"""

from __future__ import annotations

from typing import Protocol


class Ledger(Protocol):
    #: False: ``placed`` and ``answered`` record nothing and the book does not call them
    counts_tasks: bool

    def admit(self, client: bytes) -> bool:
        """May a task of ``client`` be given to an engine now?"""
        ...

    def placed(self, client: bytes) -> None:
        """A task of ``client`` was given to an engine."""
        ...

    def answered(self, client: bytes) -> None:
        """A placed task of ``client`` was answered (by its engine or in its stead)."""
        ...


class OpenLedger:
    """No limits: every client's tasks may be placed as engines have room."""

    __slots__ = ()
    counts_tasks = False

    def admit(self, client: bytes) -> bool:
        return True

    def placed(self, client: bytes) -> None:
        pass

    def answered(self, client: bytes) -> None:
        pass
