"""Who owns a cluster: one controller per profile and cluster id, and leftovers of dead ones.

A controller holds an exclusive ``flock`` on ``<profile>/pid/<cluster_id>.lock`` for its whole
life. The kernel drops the lock when the process dies, even by SIGKILL, so a second
controller (or ``zpar cluster start``) on the same profile and cluster id is refused while
the first runs, and never refused because of a stale file. The controller's private run
directory (``/tmp/zpar-*``, ipc sockets and the key handed to the scheduler) records its
owner's pid; ``sweep_stale_rundirs`` removes those whose owner is gone, and whoever notices
first (cluster start, stop or list) calls it.

The processes a launcher starts watch it (``watch_owner``): when the Python process that
owns a ``zpar.Cluster()`` is killed, even by SIGKILL, its controller and engines stop within
seconds (their own clean stop) instead of outliving it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zpar.cluster.connection import pid_namespace, profile_dir
from zpar.errors import ClusterBusy

log = logging.getLogger(__name__)

#: File in a run directory naming the process that owns it.
RUNDIR_OWNER = "owner.pid"
#: Prefix of run directories (tempfile.mkdtemp(prefix=...)).
RUNDIR_PREFIX = "zpar-"
#: The name a controller started without a cluster id locks (the profile's default cluster).
DEFAULT_LOCK_NAME = "default"


def lock_path(profile: str, cluster_id: str) -> Path:
    d = profile_dir(profile) / "pid"
    d.mkdir(mode=0o700, exist_ok=True)
    return d / f"{cluster_id or DEFAULT_LOCK_NAME}.lock"


def _owner_of(path: Path) -> str:
    try:
        return path.read_text().strip() or "?"
    except OSError:
        return "?"


class ControllerLock:
    """Held by a running controller; ``acquire`` raises ClusterBusy naming the owner."""

    def __init__(self, profile: str, cluster_id: str) -> None:
        self.profile = profile
        self.cluster_id = cluster_id or DEFAULT_LOCK_NAME
        self.path = lock_path(profile, cluster_id)
        self._fd: int | None = None

    def acquire(self) -> ControllerLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClusterBusy(
                f"cluster {self.cluster_id!r} of profile {self.profile!r} is already running "
                f"(controller pid {_owner_of(self.path)}); stop it first: zpar cluster stop "
                f"--profile {self.profile} --cluster-id {self.cluster_id}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            # unlink first, while still holding the lock: a newcomer then locks a new file
            try:
                if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                    self.path.unlink()
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def controller_running(profile: str, cluster_id: str) -> bool:
    """True if a live controller holds this cluster's lock (checked without keeping it)."""
    path = lock_path(profile, cluster_id)
    if not path.exists():
        return False
    try:
        lock = ControllerLock(profile, cluster_id).acquire()
    except ClusterBusy:
        return True
    except OSError:
        return False
    os.close(lock._fd)  # type: ignore[arg-type]  # not release(): the file is not ours
    lock._fd = None
    return False


def write_rundir_owner(rundir: Path) -> None:
    (rundir / RUNDIR_OWNER).write_text(f"{os.getpid()}\n")


def _alive_since(pid: int, since: float) -> bool:
    """Is ``pid`` a live process started no later than ``since`` (so not a reused pid)?"""
    import psutil

    try:
        return psutil.Process(pid).create_time() <= since + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def sweep_stale_rundirs(tmp: str | None = None) -> list[Path]:
    """Remove this user's controller run directories whose owner died; return them."""
    removed = []
    root = Path(tmp or tempfile.gettempdir())
    uid = os.getuid()
    for d in root.glob(f"{RUNDIR_PREFIX}*"):
        try:
            st = d.stat()
            if not d.is_dir() or st.st_uid != uid:
                continue
            owner = d / RUNDIR_OWNER
            pid = int(owner.read_text().strip())  # a directory still being made has none
            made = owner.stat().st_mtime
        except (OSError, ValueError):
            continue
        if not _alive_since(pid, made):
            shutil.rmtree(d, ignore_errors=True)
            log.info("removed %s: its controller (pid %d) is gone", d, pid)
            removed.append(d)
    return removed


# -- the owner of a cluster's processes ---------------------------------------------------

#: Environment variable naming the process that started a controller or an engine
#: (``pid:create_time:pid namespace``); when it dies they stop (zpar.cluster.launchers.base.spawn).
OWNER_ENV = "ZPAR_OWNER"
#: Seconds a process whose owner died has to stop after SIGTERM before it exits hard.
OWNER_GONE_GRACE = 5.0


def owner_token(pid: int | None = None) -> str:
    """The value of OWNER_ENV for ``pid`` (default: this process)."""
    import psutil

    pid = os.getpid() if pid is None else pid
    return f"{pid}:{psutil.Process(pid).create_time():.3f}:{pid_namespace()}"


def _owner_alive(pid: int, created: float) -> bool:
    import psutil

    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def watch_owner(on_gone: Callable[[int], None], environ: dict[str, str] | None = None) -> bool:
    """Call ``on_gone(pid)`` from a thread once the owner OWNER_ENV names has exited (at
    once if it already has); False if there is none to watch (unset, another pid namespace,
    malformed). A pidfd wakes the thread the moment the owner dies, even by SIGKILL; where
    there is none (not Linux >= 5.3), it looks twice a second."""
    value = (os.environ if environ is None else environ).get(OWNER_ENV, "")
    pid_s, _, rest = value.partition(":")
    created_s, _, namespace = rest.partition(":")
    try:
        pid, created = int(pid_s), float(created_s)
    except ValueError:
        return False
    if not namespace or namespace != pid_namespace():
        return False
    fd = -1
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = -1

    def wait() -> None:
        if fd >= 0 and _owner_alive(pid, created):
            select.select([fd], [], [])
        while _owner_alive(pid, created):
            time.sleep(0.5)
        if fd >= 0:
            os.close(fd)
        log.warning("the process that started this one (pid %d) exited: stopping", pid)
        on_gone(pid)

    threading.Thread(target=wait, name="zpar-owner-watch", daemon=True).start()
    return True


def stop_self(pid: int) -> None:
    """``on_gone`` of watch_owner: SIGTERM to this process (its own clean stop), then exit
    after OWNER_GONE_GRACE seconds if that did not."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(OWNER_GONE_GRACE)
    os._exit(1)
