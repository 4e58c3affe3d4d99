"""Private shared-memory files: made 0600, space reserved, mapped, and unlinked when done.

The communicator's rings and mailboxes (communicator/shm.py, communicator/mailbox.py) and the distributed
arrays' gather (darray/shmgather.py) share memory between processes of one user on one host
through a file in a tmpfs (/dev/shm). Each needs the same care, kept here once:

- created with O_EXCL and mode 0600: never another's file, never readable by other users;
- its space reserved with posix_fallocate, so a full tmpfs fails at creation with ENOSPC
  instead of killing a process with SIGBUS when it first writes a page that cannot exist;
- nothing left behind: a failed creation removes the file; the peer that maps it second
  unlinks it (both hold the mapping); the creator unlinks it on close, or on return; a
  creator killed before its peer mapped the file leaves it, and the first creation of the
  same kind in any later process of the user removes it (sweep_orphans).

A peer attaches only a path under the same directory with the same name prefix and of the
expected size: a path from a message is checked before anything is opened.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
import uuid
from collections.abc import Iterator

#: Where the files live: a tmpfs every Linux host has, so the pages are memory, not disk.
SHM_DIR = "/dev/shm"

#: A file of a dead creator is an orphan once it is this old: a peer maps a file within
#: its communicator's set-up (seconds), so an older file of a dead pid has no peer coming.
ORPHAN_AGE = 60.0

_swept: set[tuple[str, str]] = set()
_swept_lock = threading.Lock()


def create_mapped(prefix: str, size: int, directory: str = SHM_DIR) -> tuple[str, mmap.mmap]:
    """A new private file ``directory/prefix<pid>-<random>`` of ``size`` bytes, mapped.
    Raises OSError (ENOSPC when the tmpfs is full, ...) and then leaves no file behind."""
    if size <= 0:
        raise ValueError(f"a shared file needs a size > 0, got {size}")
    with _swept_lock:
        first = (prefix, directory) not in _swept
        _swept.add((prefix, directory))
    if first:
        sweep_orphans(prefix, directory)
    path = os.path.join(directory, f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        mapping = mmap.mmap(fd, size)
    except BaseException:
        unlink_quietly(path)
        raise
    finally:
        os.close(fd)
    return path, mapping


def sweep_orphans(prefix: str, directory: str = SHM_DIR, *, age: float = ORPHAN_AGE) -> list[str]:
    """Remove this user's files ``create_mapped(prefix, ...)`` made in processes that are
    gone (SIGKILLed between creating a file and its peer mapping it), older than ``age``
    seconds; the paths removed. A pid in use again is taken as alive: the file stays."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    uid, now = os.getuid(), time.time()
    for name in names:
        pid = name[len(prefix) :].split("-", 1)[0] if name.startswith(prefix) else ""
        if not pid.isdigit():
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
            if st.st_uid != uid or now - st.st_mtime < age or _alive(int(pid)):
                continue
            os.unlink(path)
        except OSError:  # gone meanwhile, or not ours to remove
            continue
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; not a pid: kept
        return True
    return True


def check_path(
    path: str, prefix: str, directory: str = SHM_DIR, what: str = "shared memory"
) -> None:
    """ValueError unless ``path`` names a file ``create_mapped(prefix, ...)`` could have
    made: directly in ``directory``, its name starting with ``prefix``."""
    name = path[len(directory) + 1 :] if path.startswith(directory + "/") else ""
    if not name.startswith(prefix) or "/" in name:
        raise ValueError(f"refusing {what} path {path!r}: not {directory}/{prefix}*")


def attach_mapped(
    path: str, prefix: str, size: int, directory: str = SHM_DIR, what: str = "shared memory"
) -> mmap.mmap:
    """Map the file another process made with ``create_mapped`` (checked: its place, name
    and size), then unlink it: both ends hold the mapping, nothing is left at exit.
    ``what`` names the file in errors."""
    check_path(path, prefix, directory, what)
    fd = os.open(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size != size:
            raise ValueError(f"{what} {path} is not {size} bytes")
        mapping = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    unlink_quietly(path)
    return mapping


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it is still there (the peer may have unlinked it already)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def mapped_until_return(
    prefix: str, size: int, directory: str = SHM_DIR
) -> Iterator[tuple[str, mmap.mmap] | None]:
    """``(path, mapping)`` of a new private file, unlinked when the block ends (the mapping
    lives on while anything holds it); None when it cannot be had (no such directory, no
    room), for the caller to take its other path."""
    if not os.path.isdir(directory):
        yield None
        return
    try:
        path, mapping = create_mapped(prefix, size, directory)
    except OSError:
        yield None
        return
    try:
        yield path, mapping
    finally:
        unlink_quietly(path)
