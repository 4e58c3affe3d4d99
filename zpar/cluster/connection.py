"""Profiles and connection files: where a cluster's addresses and key live on disk.

A profile directory (``$ZPAR_DIR/profile_<name>``, default ``~/.zpar``) holds
``security/zpar-client.json`` and ``security/zpar-engine.json`` (mode 0600: they hold the
key), and ``clusters/*.json`` for clusters the launcher started. The zpar directory, each
profile and its subdirectories are 0700: the task store, logs and pid files under them hold
users' data and are nobody else's business (docs/security.md).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zpar.cluster.names import profile_name
from zpar.constants import DEFAULT_PROFILE, SIGNATURE_SCHEME, ZPAR_DIR_ENV
from zpar.errors import ConnectionFileError

CLIENT_FILE = "zpar-client.json"
ENGINE_FILE = "zpar-engine.json"


def zpar_dir() -> Path:
    return Path(os.environ.get(ZPAR_DIR_ENV) or Path.home() / ".zpar")


def profile_dir(profile: str = DEFAULT_PROFILE, *, create: bool = True) -> Path:
    profile_name(profile)  # ValueError naming it: a name must not lead out of zpar_dir()
    d = zpar_dir() / f"profile_{profile}"
    if create:
        private_dir(zpar_dir())
        private_dir(d)
        for sub in ("security", "clusters", "log"):
            private_dir(d / sub)
    return d


def profiles() -> list[str]:
    """Names of the profiles under zpar_dir(), sorted."""
    root = zpar_dir()
    return sorted(p.name[len("profile_") :] for p in root.glob("profile_*") if p.is_dir())


def existing_profile(profile: str) -> str:
    """``profile`` if it exists; ValueError naming those that do otherwise. The default
    profile always exists (it is made on first use); any other is made only by
    ``zpar profile create`` or ``zpar cluster start``, so a misspelt name is refused
    instead of becoming a profile."""
    profile_name(profile)
    if profile == DEFAULT_PROFILE or (zpar_dir() / f"profile_{profile}").is_dir():
        return profile
    have = ", ".join(sorted({DEFAULT_PROFILE, *profiles()}))
    raise ValueError(
        f"no profile {profile!r} in {zpar_dir()} (profiles there: {have}); "
        f"create it with: zpar profile create {profile}"
    )


def private_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) if missing and make it 0700: owner only."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def security_dir(profile: str = DEFAULT_PROFILE) -> Path:
    return profile_dir(profile) / "security"


def new_key() -> str:
    return secrets.token_hex(32)


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """What a client or engine needs to reach a controller."""

    registration: str  # hub ROUTER address, e.g. tcp://127.0.0.1:5555
    key: str  # hex; "" only for an explicitly insecure cluster
    signature_scheme: str = SIGNATURE_SCHEME
    location: str = ""  # controller host, for humans and ssh tunnels
    cluster_id: str = ""
    controller_pid: int = 0
    # where controller_pid means that process: pid_namespace() of the controller, and its
    # start time (a pid reused since is not taken for it)
    controller_pidns: str = ""
    controller_started: float = 0.0
    # CurveZMQ (a cluster started with --curve; zpar.wire.curve): the controller's public key
    # and the cluster's client key pair, Z85. Empty: no Curve.
    curve_server_key: str = ""
    curve_public_key: str = ""
    curve_secret_key: str = ""
    # the dashboard (zpar.dashboard): its page's address and the token every request to it
    # carries (as Jupyter's server asks); empty: no dashboard
    dashboard: str = ""
    dashboard_token: str = ""

    @property
    def key_bytes(self) -> bytes:
        return self.key.encode("ascii")

    @property
    def dashboard_link(self) -> str:
        """The dashboard's address with its token, "" when the cluster has none."""
        if not self.dashboard:
            return ""
        return f"{self.dashboard}?token={self.dashboard_token}"


def write_connection_file(path: Path, info: ConnectionInfo) -> Path:
    """Write atomically with mode 0600: a reader never sees a half-written key file."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump(asdict(info), f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_connection_file(path: str | Path) -> ConnectionInfo:
    path = Path(path)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConnectionFileError(
            f"connection file {path} does not exist: is a controller running "
            "(`zpar cluster start` or `zpar controller`) with this profile?"
        ) from None
    except (OSError, ValueError) as e:
        raise ConnectionFileError(f"cannot read connection file {path}: {e}") from e
    if not isinstance(data, dict) or "registration" not in data or "key" not in data:
        raise ConnectionFileError(
            f"connection file {path} lacks 'registration' or 'key': not a zpar connection file"
        )
    if data.get("signature_scheme", SIGNATURE_SCHEME) != SIGNATURE_SCHEME:
        raise ConnectionFileError(
            f"connection file {path} uses signature scheme {data['signature_scheme']!r}; "
            f"this zpar speaks only {SIGNATURE_SCHEME!r}"
        )
    known = {k: data[k] for k in ConnectionInfo.__dataclass_fields__ if k in data}
    return ConnectionInfo(**known)


def default_url_file(profile: str = DEFAULT_PROFILE, who: str = "client") -> Path:
    name = CLIENT_FILE if who == "client" else ENGINE_FILE
    return profile_dir(profile) / "security" / name


def _runs_here(pid: int) -> bool:
    """A live process with this pid on this host (not a zombie waiting to be reaped)."""
    import psutil

    try:
        return pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stopped_on_purpose(path: str | Path, pid: int, grace: float = 5.0) -> bool:
    """A controller stopped on purpose removes its connection file as it exits; one that
    died leaves it for its successor to replace. So an engine that lost its controller
    exits instead of waiting to reconnect when the file is gone. A controller of this host
    still exiting is given ``grace`` seconds first (its engines may hear it go silent before
    it has removed the file); one still running after that was only too busy."""
    deadline = time.monotonic() + grace
    while _runs_here(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return not Path(path).exists()


def wait_for_new_controller(
    path: str | Path, lost_pid: int, timeout: float
) -> ConnectionInfo | None:
    """The connection file at ``path`` once a controller other than ``lost_pid`` wrote it
    (an engine whose controller died, waiting for one restarted on the same profile), or
    at once if that controller still runs on this host (it was only too busy to send
    heartbeats: the engine registers with it again); None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = read_connection_file(path)
            if info.controller_pid != lost_pid or _runs_here(lost_pid):
                return info
        except ConnectionFileError:
            pass  # not written yet, or being written
        time.sleep(0.1)
    return None


def wait_for_connection_file(path: str | Path, timeout: float) -> ConnectionInfo:
    """Read ``path``, waiting up to ``timeout`` s for a starting controller to write it."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            return read_connection_file(path)
        except ConnectionFileError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.02)


def pid_namespace() -> str:
    """Where a pid means the same process: this boot's id and this pid namespace's inode
    ("" where unknown). A container has its own: a pid read from a file written in another
    container is never checked here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def check_controller_alive(path: str | Path, info: ConnectionInfo) -> None:
    """Raise ConnectionFileError naming ``path`` and the pid if the controller that wrote
    it is known to be dead: same pid namespace, and no such process (or another one since)."""
    pid = info.controller_pid
    if not pid or not info.controller_pidns or info.controller_pidns != pid_namespace():
        return  # written on another host or container: only the network can tell
    import psutil

    try:
        p = psutil.Process(pid)
        started = p.create_time()
        dead = p.status() == psutil.STATUS_ZOMBIE or (
            info.controller_started and abs(started - info.controller_started) > 0.01
        )
    except psutil.NoSuchProcess:
        dead = True
    except psutil.Error:
        return
    if dead:
        raise ConnectionFileError(
            f"connection file {path} names controller pid {pid}, which is no longer running: "
            "start the cluster again (zpar cluster start) or remove the stale file"
        )
