"""The same-host lane: a rank's mailboxes driven by compiled code (design.md, "Compiled
code"), or by its pure-Python twin.

What a small message between two ranks of one host costs is Python's own work above the
mailbox, not the carrier (docs/decisions.md, "Communicator"): so the lane packs a packet
straight into a mailbox slot, matches the next packet of a link against a receive and copies
it into the user's buffer, runs a small allreduce's rounds, and waits for packets with the
GIL released: spinning while the host has a CPU for every runnable task, else yielding,
then sleeping on futex words the senders ring. ``zpar.comm._lane`` (Cython, built by
``pip install`` when a C compiler is present) and ``zpar.comm.lanepy`` have one interface
and write the same bytes. ``ZPAR_COMM_PURE=1`` chooses the twin (CI runs both).
"""

from __future__ import annotations

import os

from .lanepy import COMBINE_DTYPES, COMBINE_OPS, KIND_EAGER

if os.environ.get("ZPAR_COMM_PURE") == "1":
    from .lanepy import COMPILED, NOT_TAKEN, RAW, Lane
else:
    try:
        from ._lane import (  # type: ignore[import-not-found,no-redef]
            COMPILED,
            NOT_TAKEN,
            RAW,
            Lane,
        )
    except ImportError:  # not built (no C compiler at install): the twin
        from .lanepy import COMPILED, NOT_TAKEN, RAW, Lane  # type: ignore[assignment]

__all__ = ["COMBINE_DTYPES", "COMBINE_OPS", "COMPILED", "KIND_EAGER", "NOT_TAKEN", "RAW", "Lane"]
