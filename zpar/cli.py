"""The `zpar` command: parses arguments and calls library functions, nothing more."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from .constants import DEFAULT_PROFILE

#: exit codes
RET_OK = 0
RET_ERROR = 1
RET_USAGE = 2
RET_NOT_FOUND = 3


def _progress(have: int, want: int) -> None:
    end = "\n" if have >= want or not sys.stderr.isatty() else "\r"
    print(f"zpar: {have}/{want} engines registered", end=end, file=sys.stderr, flush=True)


def cluster_start(args: argparse.Namespace) -> int:
    from .client.client import Client
    from .launcher import DEFAULT_CLUSTER_ID, LocalCluster
    from .privacy import check_exposure

    exposure = check_exposure(args.ip, curve=args.curve, insecure=False, force=False)
    if exposure:
        print(f"zpar: warning: {exposure}", file=sys.stderr)
    t0 = time.monotonic()
    lc = LocalCluster(
        args.n,
        profile=args.profile,
        cluster_id=args.cluster_id or DEFAULT_CLUSTER_ID,
        ip=args.ip,
        daemon=args.daemon,
        log_level=args.log_level,
        controller_args=(["--db", args.db] if getattr(args, "db", None) else [])
        + (["--curve"] if getattr(args, "curve", False) else []),
    )
    try:
        lc.start(args.timeout)
        with Client(url_file=lc.client_file, timeout=args.timeout) as rc:
            lc.wait_for_engines(rc, args.timeout, progress=_progress)
        lc.save_state()
    except Exception as e:
        print(f"zpar: cluster start failed: {e}", file=sys.stderr)
        lc.stop()
        return RET_ERROR
    print(
        f"zpar: cluster {lc.cluster_id!r} (profile {args.profile!r}) up with {args.n} engines "
        f"in {time.monotonic() - t0:.2f} s; connection file {lc.client_file}",
        file=sys.stderr,
    )
    if args.daemon:
        return RET_OK
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print("zpar: press Ctrl-C to stop the cluster", file=sys.stderr)
    while not stop.wait(0.5):
        if lc.controller is not None and lc.controller.poll() is not None:
            print("zpar: the controller exited", file=sys.stderr)
            break
    lc.stop()
    return RET_OK


def cluster_stop(args: argparse.Namespace) -> int:
    from .launcher import DEFAULT_CLUSTER_ID, LaunchError, list_clusters, stop_cluster

    targets = (
        [(args.profile, args.cluster_id)]
        if args.cluster_id or not args.all
        else [(st.profile, st.cluster_id) for st, _ in list_clusters(args.profile)]
    )
    status = RET_OK
    for profile, cid in targets:
        cid = cid or DEFAULT_CLUSTER_ID
        try:
            n = stop_cluster(profile, cid)
            print(
                f"zpar: stopped cluster {cid!r} of profile {profile!r} ({n} processes)",
                file=sys.stderr,
            )
        except LaunchError as e:
            print(f"zpar: {e}", file=sys.stderr)
            status = RET_NOT_FOUND
    return status


def cluster_list(args: argparse.Namespace) -> int:
    from .launcher import list_clusters

    rows = list_clusters(args.profile)
    print(f"{'PROFILE':<12} {'CLUSTER':<12} {'ENGINES':>7} {'ALIVE':>5}  URL FILE")
    for st, alive in rows:
        print(f"{st.profile:<12} {st.cluster_id:<12} {st.n:>7} {alive:>5}  {st.url_file}")
    return RET_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zpar", description="zpar parallel computing controller")
    sub = p.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser("cluster", help="start, stop and list local clusters")
    csub = cluster.add_subparsers(dest="action", required=True)
    start = csub.add_parser("start", help="start a controller and N engines on this machine")
    start.add_argument("-n", type=int, default=2, help="number of engines (default 2)")
    start.add_argument("--daemon", action="store_true", help="return once the cluster is up")
    stop = csub.add_parser("stop", help="stop a cluster started with --daemon")
    stop.add_argument("--all", action="store_true", help="stop every recorded cluster")
    lst = csub.add_parser("list", help="list recorded clusters")
    for sp in (start, stop, lst):
        sp.add_argument("--profile", default=DEFAULT_PROFILE)
    for sp in (start, stop):
        sp.add_argument("--cluster-id", default="", help="name of the cluster (default 'default')")
    start.add_argument("--ip", default="127.0.0.1", help="interface the controller binds")
    start.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for engines")
    start.add_argument("--log-level", default="WARNING")
    start.add_argument(
        "--curve", action="store_true", help="CurveZMQ on every connection (docs/security.md)"
    )
    start.set_defaults(func=cluster_start)
    stop.set_defaults(func=cluster_stop)
    lst.set_defaults(func=cluster_list)

    ctl = sub.add_parser(
        "controller", help="run a controller (hub and schedulers) here", add_help=False
    )
    ctl.set_defaults(func=None, delegate="zpar.hub.__main__")
    eng = sub.add_parser("engine", help="run one engine here", add_help=False)
    eng.set_defaults(func=None, delegate="zpar.engine.__main__")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `zpar controller …` and `zpar engine …` hand their arguments to the process's own parser.
    if argv and argv[0] in ("controller", "engine"):
        import importlib

        mod = importlib.import_module(
            f"zpar.{'hub' if argv[0] == 'controller' else 'engine'}.__main__"
        )
        return int(mod.main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
