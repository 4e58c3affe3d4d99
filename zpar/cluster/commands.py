"""What `zpar cluster start|stop|list|engines`, `zpar profile` and `zpar config` do.

``--daemon`` runs the same command again as a detached launcher process (``--supervise``)
that owns the cluster: it waits on its children, tells the hub of engine deaths, replaces
engines with ``--keep`` and removes the cluster's record when it stops. The command that
started it returns once that launcher has recorded the cluster as up, or fails with its log.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from zpar.cluster.launcher import (
    DEFAULT_CLUSTER_ID,
    ClusterState,
    LocalCluster,
    list_clusters,
    state_file,
    stop_cluster,
    url_dir,
)
from zpar.cluster.launchers.base import log_tail, open_log
from zpar.cluster.settings import Settings, create_profile, describe, load
from zpar.constants import DEFAULT_PROFILE
from zpar.errors import LaunchError, ZparError

#: exit codes
RET_OK = 0
RET_ERROR = 1
RET_USAGE = 2
RET_NOT_FOUND = 3

#: Settings that have a flag of their own on `cluster start` / `cluster engines`.
FLAG_SETTINGS = (
    "n", "engines", "keep", "ip", "timeout", "log_level", "db", "curve", "port", "key",
    "dashboard",
)  # fmt: skip


def say(text: str) -> None:
    print(f"zpar: {text}", file=sys.stderr, flush=True)


def settings_from(args: argparse.Namespace) -> Settings:
    flags = {name: getattr(args, name, None) for name in FLAG_SETTINGS}
    origins = {}
    for item in getattr(args, "set", None) or []:
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--set {item!r}: use NAME=VALUE, e.g. --set hwm=4")
        name = name.strip().replace("-", "_")
        flags[name], origins[name] = value, f"--set {item}"
    return load(args.profile, flags, origins=origins)


class StartProgress:
    """Engines registered of asked: a tqdm bar on a terminal, a line per change otherwise."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=want, desc="zpar: engines registered", file=sys.stderr)

    def __call__(self, have: int, want: int) -> None:
        if self.bar is not None:
            self.bar.update(have - self.bar.n)
            if have >= want:
                self.bar.close()
                say(f"{have}/{want} engines registered")
        else:
            say(f"{have}/{want} engines registered")


def _wait_until_stopped(lc: LocalCluster, owns_controller: bool) -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.2):
        if owns_controller:
            if lc.controller is not None and lc.controller.poll() is not None:
                say("the controller exited")
                return
        elif not lc.client_file.exists():
            say("the cluster's controller is gone")
            return


def _spawn_supervisor(argv: list[str], log_path: Path) -> subprocess.Popen:
    """This command again (``--supervise`` for ``--daemon``), detached, logging to
    ``log_path``."""
    cmd = [sys.executable, "-P", "-m", "zpar", *[a for a in argv if a != "--daemon"], "--supervise"]
    with open_log(log_path) as out:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip


def _daemonize(argv: list[str], log_path: Path, record: Path, timeout: float) -> int:
    """Run this command again, detached, as the cluster's launcher; wait for its record."""
    proc = _spawn_supervisor(argv, log_path)
    deadline = time.monotonic() + timeout + 30
    while True:
        if proc.poll() is not None:
            say(f"the launcher exited with code {proc.returncode}; its log {log_path}:")
            print(log_tail(log_path, 30), file=sys.stderr)
            return RET_ERROR
        if record.exists():
            try:
                if ClusterState.load(record).supervisor[:1] == [proc.pid]:
                    print(log_tail(log_path, 5).replace("\n    ", "\n").strip(), file=sys.stderr)
                    return RET_OK
            except (OSError, ValueError, TypeError, IndexError):
                pass
        if time.monotonic() > deadline:
            proc.terminate()
            say(f"the launcher did not report within {timeout:g} s; its log {log_path}")
            return RET_ERROR
        time.sleep(0.05)


def cluster_start(args: argparse.Namespace, argv: list[str]) -> int:
    from zpar.client.client import Client

    s = settings_from(args)
    cid = args.cluster_id or DEFAULT_CLUSTER_ID
    from zpar.wire.privacy import check_exposure

    exposure = check_exposure(s.ip, curve=s.curve, insecure=False, force=False)
    if exposure:
        say(f"warning: {exposure}")
    from zpar.wire.privacy import dashboard_warning

    exposure = dashboard_warning(s.dashboard)
    if exposure:
        say(f"warning: {exposure}")
    lc = LocalCluster(s.n, profile=args.profile, cluster_id=cid, settings=s)
    if args.daemon:
        lc.check_not_running()
        return _daemonize(
            argv, lc.log_dir / f"{cid}-launcher.log", state_file(args.profile, cid), s.timeout
        )
    t0 = time.monotonic()
    lc.on_event = say
    try:
        lc.start(s.timeout)
        with Client(url_file=lc.client_file, timeout=s.timeout) as rc:
            lc.wait_for_engines(rc, s.timeout, progress=StartProgress(s.n))
        lc.save_state()
    except Exception as e:
        say(f"cluster start failed: {e}")
        lc.stop()
        return RET_ERROR
    say(
        f"cluster {cid!r} (profile {args.profile!r}, {s.engines} engines) up with {s.n} "
        f"engines in {time.monotonic() - t0:.2f} s; connection file {lc.client_file}"
    )
    link = _dashboard_link(lc.client_file)
    if link:
        say(f"dashboard: {link}")
    if not args.supervise:
        say("press Ctrl-C to stop the cluster")
    _wait_until_stopped(lc, owns_controller=True)
    lc.stop()
    return RET_OK


def _dashboard_link(client_file: Path) -> str:
    """The dashboard's link (token included) from a connection file, "" if none."""
    from zpar.cluster.connection import read_connection_file

    try:
        return read_connection_file(client_file).dashboard_link
    except ZparError:
        return ""


def cluster_engines(args: argparse.Namespace, argv: list[str]) -> int:
    """Add engines to a running cluster (ipcluster's `engines` subcommand)."""
    from zpar.client.client import Client

    s = settings_from(args)
    cid = args.cluster_id or DEFAULT_CLUSTER_ID
    main = state_file(args.profile, cid)
    client_file = url_dir(args.profile, cid) / "zpar-client.json"
    if not client_file.exists():
        raise LaunchError(
            f"no running cluster {cid!r} in profile {args.profile!r} ({client_file} missing): "
            "start one with zpar cluster start"
        )
    if args.daemon:
        log_path = main.parent.parent / "log" / f"{cid}-engines-launcher.log"
        return _daemonize_engines(argv, log_path, main.parent, cid, s.timeout)
    lc = LocalCluster(0, profile=args.profile, cluster_id=cid, settings=s)
    lc.throwaway = False
    lc.on_event = say
    with Client(url_file=client_file, timeout=s.timeout) as rc:
        before = len(rc.ids)
        try:
            lc.add_engines(s.n)
            lc.n = before + s.n
            lc.wait_for_engines(rc, s.timeout, progress=StartProgress(lc.n))
        except Exception as e:
            say(f"adding engines failed: {e}")
            lc.stop()
            return RET_ERROR
    lc.n = s.n
    lc.save_state(main.parent / f"{cid}.engines-{os.getpid()}.json")
    say(f"{s.n} {s.engines} engines added to cluster {cid!r}")
    _wait_until_stopped(lc, owns_controller=False)
    lc.stop()
    return RET_OK


def _daemonize_engines(argv: list[str], log_path: Path, d: Path, cid: str, timeout: float) -> int:
    proc = _spawn_supervisor(argv, log_path)
    record = d / f"{cid}.engines-{proc.pid}.json"
    deadline = time.monotonic() + timeout + 30
    while not record.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.terminate()
            say(f"adding engines failed; the launcher's log {log_path}:")
            print(log_tail(log_path, 30), file=sys.stderr)
            return RET_ERROR
        time.sleep(0.05)
    print(log_tail(log_path, 3).replace("\n    ", "\n").strip(), file=sys.stderr)
    return RET_OK


def cluster_stop(args: argparse.Namespace, argv: list[str]) -> int:
    """One cluster, or with ``--all`` every cluster of ``--profile`` (every profile without)."""
    targets = (
        [(args.profile or DEFAULT_PROFILE, args.cluster_id)]
        if args.cluster_id or not args.all
        else [(st.profile, st.cluster_id) for st, _ in list_clusters(args.profile)]
    )
    status = RET_OK
    for profile, cid in targets:
        cid = cid or DEFAULT_CLUSTER_ID
        try:
            n = stop_cluster(profile, cid)
            say(f"stopped cluster {cid!r} of profile {profile!r} ({n} processes)")
        except LaunchError as e:
            say(str(e))
            status = RET_NOT_FOUND
    return status


def _registered(st: ClusterState) -> str:
    from zpar.cluster.launchers.hubquery import HubLine

    try:
        line = HubLine(st.url_file)
        try:
            return str(len(line.engine_info()))
        finally:
            line.close()
    except Exception:
        return "?"


def cluster_list(args: argparse.Namespace, argv: list[str]) -> int:
    """Running clusters of ``--profile``, or of every profile without it."""
    rows = list_clusters(args.profile)
    print(f"{'PROFILE':<12} {'CLUSTER':<12} {'LAUNCHER':<8} {'ENGINES':>9} {'PROCS':>5}  URL FILE")
    for st, procs in rows:
        kinds = sorted({s.get("kind", st.launcher) for s in st.engine_sets} or {st.launcher})
        # a controller's own record (no launcher owns it) does not know how many were asked
        engines = f"{_registered(st)}/{st.n if st.supervisor else '-'}"
        print(
            f"{st.profile:<12} {st.cluster_id:<12} {','.join(kinds):<8} {engines:>9} "
            f"{procs:>5}  {st.url_file}"
        )
    return RET_OK


def cluster_status(args: argparse.Namespace, argv: list[str]) -> int:
    """The controller's status (hub/status.py): its pid, engines, refused messages."""
    import json

    from zpar.cluster.launchers.hubquery import HubLine
    from zpar.wire.messages import ControllerStatusRequest, MsgType

    cid = args.cluster_id or DEFAULT_CLUSTER_ID
    client_file = url_dir(args.profile, cid) / "zpar-client.json"
    if not client_file.exists():
        say(f"no running cluster {cid!r} in profile {args.profile!r} ({client_file} missing)")
        return RET_NOT_FOUND
    line = HubLine(client_file)
    try:
        st = line.request(MsgType.CONTROLLER_STATUS_REQUEST, ControllerStatusRequest().as_dict())
    except Exception as e:
        say(f"cluster {cid!r}: the controller did not answer: {e}")
        return RET_ERROR
    finally:
        line.close()
    if args.json:
        keys = ("pid", "engines", "refused", "total_refused", "dashboard")
        print(json.dumps({k: st.get(k) for k in keys}, sort_keys=True))
        return RET_OK
    print(f"cluster {cid!r}: controller pid {st['pid']}, {len(st['engines'])} engines")
    if st.get("dashboard"):
        print(f"dashboard: {st['dashboard']}")
    print(f"refused messages: {st['total_refused']}")
    for process, counts in sorted(st["refused"].items()):
        if counts:
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(counts.items()))
            print(f"  {process:<16} {reasons}")
    return RET_OK


def profile_create(args: argparse.Namespace, argv: list[str]) -> int:
    d = create_profile(args.name)
    print(d)
    say(f"profile {args.name!r} ready; edit {d / 'config.toml'}")
    return RET_OK


def config_show(args: argparse.Namespace, argv: list[str]) -> int:
    s = load(args.profile)
    rows = describe(s)
    width = max(len(n) for n, _, _ in rows)
    vwidth = min(40, max(len(v) for _, v, _ in rows))
    print(f"# effective settings of profile {args.profile!r}")
    for name, value, source in rows:
        print(f"{name:<{width}} = {value:<{vwidth}}  # {source}")
    return RET_OK


def smoke(args: argparse.Namespace, argv: list[str]) -> int:
    from zpar.cluster.smoke import smoke_test
    from zpar.cluster.smokejob import full_job

    try:
        if args.job == "full":
            report = full_job(
                args.file, args.profile, args.engines, args.timeout, args.hold,
                say=lambda text: say(f"smoke: {text}"),
            )  # fmt: skip
        else:
            report = smoke_test(args.file, args.profile, args.engines, args.timeout)
        say(f"smoke: {report}")
    except AssertionError as e:
        say(f"smoke: FAILED: {e}")
        return RET_ERROR
    return RET_OK


def add_cluster_options(p: argparse.ArgumentParser, checked: Any, names: Any) -> None:
    """Options shared by `cluster start` and `cluster engines` (None: from the settings)."""
    from zpar.cluster.settings import LAUNCHERS

    p.add_argument("-n", type=checked(names.engine_count), help="number of engines")
    p.add_argument("--engines", choices=LAUNCHERS, help="how engines are started")
    p.add_argument("--daemon", action="store_true", help="return once the engines are up")
    p.add_argument("--keep", action="store_true", default=None, help="replace engines that die")
    p.add_argument("--timeout", type=float, help="seconds to wait for the engines")
    p.add_argument("--log-level", type=checked(names.log_level))
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="any setting (see zpar config show), e.g. --set hwm=4; repeatable",
    )
    p.add_argument("--supervise", action="store_true", help=argparse.SUPPRESS)
