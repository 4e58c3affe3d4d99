"""Functions the workloads run remotely. Importable by every system's workers (the bench
directory is on their path), so none of them pays for pickling functions by value."""

from __future__ import annotations

import os
import time


def noop(*args):
    return None


def identity(x):
    return x


def getpid():
    return os.getpid()


def spin_once(marker: str, seconds: float) -> str:
    """Spin (holding the GIL) unless a previous attempt already started: a resubmitted
    copy returns at once, so 'time to result' measures failure detection, not the spin."""
    if os.path.exists(marker):
        return "resubmitted"
    with open(marker + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)
    end = time.time() + seconds
    while time.time() < end:
        pass
    return "finished"


def run_chunk(f, chunk):
    return [f(x) for x in chunk]


def sleep_for(seconds):
    """An element of W10's maps: ``seconds`` of waiting (no CPU, so the makespan measures
    the balance and the overhead, not the two cores' contention)."""
    time.sleep(seconds)
    return seconds
