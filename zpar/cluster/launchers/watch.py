"""Waiting on launched processes: the moment one exits, a callback runs (loky's way).

Each process gets a pidfd (Linux >= 5.3): readable when the process exits, so one select()
over all of them wakes within microseconds of a death instead of at the next poll. Where
pidfds are unavailable the thread polls every 20 ms.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Poll interval where pidfds are unavailable.
POLL_INTERVAL = 0.02


class ProcessWatcher:
    """Calls ``on_exit(tag, proc)`` in its own thread once for each watched process's exit."""

    def __init__(self, on_exit: Callable[[Any, subprocess.Popen], None]) -> None:
        self.on_exit = on_exit
        self._procs: dict[int, tuple[Any, subprocess.Popen, int | None]] = {}  # pid -> ...
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="zpar-launcher-watch", daemon=True)
        self._thread.start()

    def watch(self, tag: Any, proc: subprocess.Popen) -> None:
        try:
            fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # old kernel, or already reaped
            fd = None
        with self._lock:
            self._procs[proc.pid] = (tag, proc, fd)
        os.write(self._wake_w, b"w")

    def unwatch(self, proc: subprocess.Popen) -> None:
        with self._lock:
            entry = self._procs.pop(proc.pid, None)
        if entry is not None and entry[2] is not None:
            os.close(entry[2])

    def _run(self) -> None:
        while not self._stopping:
            with self._lock:
                entries = list(self._procs.values())
            fds = [fd for _, _, fd in entries if fd is not None]
            polling = any(fd is None for _, _, fd in entries)
            try:
                ready, _, _ = select.select(
                    [self._wake_r, *fds], [], [], POLL_INTERVAL if polling else None
                )
            except (OSError, ValueError):  # an fd closed under us by unwatch: look again
                continue
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            for tag, proc, fd in entries:
                if proc.poll() is None:
                    continue
                with self._lock:
                    if self._procs.pop(proc.pid, None) is None:
                        continue  # unwatched meanwhile
                if fd is not None:
                    os.close(fd)
                if self._stopping:
                    return
                try:
                    self.on_exit(tag, proc)
                except Exception:  # a failing callback must not stop the watching
                    log.exception("launcher: handling the exit of pid %d failed", proc.pid)

    def close(self) -> None:
        self._stopping = True
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        with self._lock:
            for _, _, fd in self._procs.values():
                if fd is not None:
                    os.close(fd)
            self._procs.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
