"""Whether this host has a CPU for every runnable task now: the count the same-host lane's
waits (its twin's, here) and cma's split reads decide by (docs/decisions.md, "A blocking
receive spins while the host has room")."""

from __future__ import annotations

import os


def running_tasks(fd: int) -> int:
    """The host's runnable tasks now, the caller among them: /proc/loadavg's fourth field
    ("running/total"), read from ``fd`` (an open /proc/loadavg); -1 when unreadable."""
    try:
        return int(os.pread(fd, 128, 0).split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return -1


def open_loadavg() -> int:
    """A descriptor of /proc/loadavg, kept open by the reader (one pread per reading); -1
    where there is none."""
    try:
        return os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


_FD = open_loadavg()


def has_room() -> bool:
    """A CPU for every runnable task of the host (the caller's included) right now."""
    n = running_tasks(_FD) if _FD >= 0 else -1
    return 0 < n <= (os.cpu_count() or 1)
