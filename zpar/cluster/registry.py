"""Clusters recorded on disk: the record a cluster's launcher owns, listing, stopping.

``<profile>/clusters/<cluster_id>.json`` holds the pids (with create times, so a reused pid is
never killed) and each engine set's record; only the launcher that wrote it removes it.
Engines added by `zpar cluster engines` are recorded beside it
(``<cluster_id>.engines-<pid>.json``). Whoever lists or stops clusters also clears what
dead ones left behind (records, connection files, controller run directories).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from zpar.cluster.connection import profile_dir
from zpar.cluster.launchers import engine_set_class
from zpar.cluster.launchers.base import alive, stop_processes
from zpar.cluster.ownership import sweep_stale_rundirs
from zpar.errors import LaunchError, ZparError

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_ID = "default"


def url_dir(profile: str, cluster_id: str) -> Path:
    """Connection files of a cluster; the default cluster's are where zpar.Client() looks."""
    sec = profile_dir(profile) / "security"
    return sec if cluster_id == DEFAULT_CLUSTER_ID else sec / f"cluster-{cluster_id}"


def state_file(profile: str, cluster_id: str) -> Path:
    return profile_dir(profile) / "clusters" / f"{cluster_id}.json"


@dataclass
class ClusterState:
    """What `zpar cluster stop/list` needs to find a cluster's processes again."""

    cluster_id: str
    profile: str
    n: int  # engines asked for
    url_file: str
    launcher: str = "local"
    controller: list[float] = field(default_factory=list)  # [pid, create_time], or []
    supervisor: list[float] = field(default_factory=list)  # the launcher process owning it
    engine_sets: list[dict[str, Any]] = field(default_factory=list)
    keep: bool = False
    started: float = 0.0

    def save(self, path: Path) -> Path:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        # 0600 like every file under the profile (docs/security.md)
        with open(tmp, "w", opener=lambda p, f: os.open(p, f, 0o600)) as out:
            out.write(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        data = json.loads(path.read_text())
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def local_idents(self) -> list[list[float]]:
        """This machine's processes of the cluster: engines first, controller last."""
        out = [pid for s in self.engine_sets for pid in s.get("pids", [])]
        out += [t for s in self.engine_sets for t in s.get("tunnels", [])]
        for one in (self.supervisor, self.controller):
            if one:
                out.append(one)
        return out

    def processes(self) -> list[psutil.Process]:
        """The cluster's local processes still alive (same pid and create time)."""
        return alive(self.local_idents())

    def remote(self) -> bool:
        """Has engines this machine cannot see (ssh hosts, batch jobs)?"""
        return any(s.get("hosts") or s.get("job_id") for s in self.engine_sets)


def record_controller(profile: str, cluster_id: str, url_file: Path, launched: bool) -> Path:
    """A controller's own record, written as it starts (its lock held): a controller
    started by hand (``zpar controller``) or by a ``zpar.Cluster()`` is then listed and
    stopped as any other. A launcher that keeps the cluster writes over it, with its own
    pid and its engines (LocalCluster.save_state)."""
    from zpar.cluster.launchers.base import ident

    cid = cluster_id or DEFAULT_CLUSTER_ID
    st = ClusterState(
        cluster_id=cid,
        profile=profile,
        n=0,
        url_file=str(url_file),
        launcher="local" if launched else "manual",
        controller=ident(os.getpid()),
        started=time.time(),
    )
    return st.save(state_file(profile, cid))


def forget_controller(profile: str, cluster_id: str) -> None:
    """Remove the record ``record_controller`` wrote, unless a launcher has taken it over."""
    path = state_file(profile, cluster_id or DEFAULT_CLUSTER_ID)
    try:
        st = ClusterState.load(path)
    except (OSError, ValueError, TypeError):
        return
    if st.controller[:1] == [os.getpid()] and not st.supervisor:
        path.unlink(missing_ok=True)


def cluster_records(profile: str, cluster_id: str) -> list[Path]:
    """The cluster's record and those of engines added to it, main record first."""
    d = profile_dir(profile) / "clusters"
    return [d / f"{cluster_id}.json", *sorted(d.glob(f"{cluster_id}.engines-*.json"))]


def list_clusters(profile: str | None = None) -> list[tuple[ClusterState, int]]:
    """(state, live local process count) of every live recorded cluster.

    The state's ``n`` and ``engine_sets`` include engines added by `zpar cluster engines`.
    Records of clusters whose processes are all gone (killed, machine rebooted) are removed
    here, with their connection files, as are run directories of dead controllers.
    """
    from zpar.cluster.connection import zpar_dir

    sweep_stale_rundirs()
    root = zpar_dir()
    pattern = f"profile_{profile}/clusters/*.json" if profile else "profile_*/clusters/*.json"
    out = []
    for path in sorted(root.glob(pattern)):
        if ".engines-" in path.name:
            continue
        try:
            st = ClusterState.load(path)
        except (OSError, ValueError, TypeError):
            log.warning("unreadable cluster file %s ignored", path)
            continue
        if not st.processes():
            _forget_dead_cluster(path, st)
            continue
        for extra in cluster_records(st.profile, st.cluster_id)[1:]:
            try:
                more = ClusterState.load(extra)
            except (OSError, ValueError, TypeError):
                continue
            if more.processes() or more.remote():
                st.n += more.n
                st.engine_sets += more.engine_sets
            else:
                extra.unlink(missing_ok=True)
        out.append((st, len(st.processes())))
    return out


def _forget_dead_cluster(path: Path, st: ClusterState) -> None:
    log.info("cluster %r of profile %r is gone: record removed", st.cluster_id, st.profile)
    path.unlink(missing_ok=True)
    remove_dead_connection_files(Path(st.url_file).parent)


def remove_dead_connection_files(directory: Path) -> None:
    """Remove connection files there whose controller is no longer running. A file that
    records its pid namespace is judged only in that namespace: a container sharing the
    profile's volume never removes the files of a controller in another container."""
    from zpar.cluster.connection import (
        CLIENT_FILE,
        ENGINE_FILE,
        check_controller_alive,
        read_connection_file,
    )

    for name in (ENGINE_FILE, CLIENT_FILE):
        path = directory / name
        try:
            info = read_connection_file(path)
        except ZparError:
            continue
        if info.controller_pidns:
            try:
                check_controller_alive(path, info)
            except ZparError:
                path.unlink(missing_ok=True)
        elif info.controller_pid and not psutil.pid_exists(info.controller_pid):
            path.unlink(missing_ok=True)


def stop_recorded(st: ClusterState, timeout: float = 5.0) -> int:
    """Stop what a record names: its supervising launcher (which stops the rest), then
    whatever is still running: engine sets first, the controller last."""
    count = len(st.processes())
    if st.supervisor and st.supervisor[0] != os.getpid():
        # it stops its engines and its controller first; give it time for that
        stop_processes(alive([st.supervisor]), timeout + 10)
    for rec in st.engine_sets:  # what its launcher left (or all, if it was SIGKILLed)
        try:
            remote = engine_set_class(rec.get("kind", "local")).stop_record(rec, timeout)
        except LaunchError as e:
            log.warning("stopping %s engines: %s", rec.get("kind"), e)
            continue
        if rec.get("hosts") or rec.get("job_id"):
            count += remote  # remote engines or jobs: not among the local processes
    if st.controller:
        stop_processes(alive([st.controller]), timeout)
    return count


def stop_cluster(profile: str, cluster_id: str, timeout: float = 5.0) -> int:
    """Stop a recorded cluster and the engines added to it; return how many processes
    (or batch jobs) were stopped."""
    sweep_stale_rundirs()
    paths = [p for p in cluster_records(profile, cluster_id) if p.exists()]
    if not paths or paths[0].name != f"{cluster_id}.json":
        raise LaunchError(
            f"no cluster {cluster_id!r} recorded for profile {profile!r} "
            f"({state_file(profile, cluster_id)})"
        )
    main = ClusterState.load(paths[0])
    count = 0
    for path in [*paths[1:], paths[0]]:  # added engines first, the controller's record last
        try:
            st = main if path == paths[0] else ClusterState.load(path)
        except (OSError, ValueError, TypeError):
            continue
        count += stop_recorded(st, timeout)
        path.unlink(missing_ok=True)
    remove_dead_connection_files(Path(main.url_file).parent)
    return count
