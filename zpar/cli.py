"""The `zpar` command: parses arguments and calls library functions, nothing more."""

from __future__ import annotations

import argparse
import sys

from zpar.cluster import names
from zpar.cluster.argparsing import Parser, checked

from .constants import DEFAULT_PROFILE
from .errors import ZparError

#: exit codes
RET_OK = 0
RET_ERROR = 1
RET_USAGE = 2
RET_NOT_FOUND = 3


def _profile(p: argparse.ArgumentParser, default: str | None = DEFAULT_PROFILE) -> None:
    p.add_argument("--profile", default=default, type=checked(names.profile_name))


def _cluster_id(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster-id",
        default="",
        type=checked(names.cluster_id),
        help="name of the cluster (default 'default')",
    )


def build_parser() -> argparse.ArgumentParser:
    from zpar.cluster import commands as cc

    p = Parser(prog="zpar", description="zpar parallel computing controller")
    p.add_argument("--version", action="version", version=f"zpar {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    cluster = sub.add_parser("cluster", help="start, stop, list clusters; add engines")
    csub = cluster.add_subparsers(dest="action", required=True, parser_class=Parser)
    start = csub.add_parser("start", help="start a controller and N engines")
    cc.add_cluster_options(start, checked, names)
    start.add_argument("--ip", help="interface the controller binds")
    start.add_argument("--db", help="task store URL ('memory', sqlite:///…, postgresql://…)")
    start.add_argument(
        "--curve",
        action="store_true",
        default=None,
        help="CurveZMQ on every connection (docs/security.md)",
    )
    start.add_argument(
        "--port", type=int, help="first of the controller's consecutive tcp ports (0: random)"
    )
    start.add_argument(
        "--key", help="fixed cluster key (prefer ZPAR_KEY or the profile: ps shows flags)"
    )
    start.add_argument(
        "--dashboard",
        metavar="ADDR",
        help="HOST:PORT of the controller's dashboard page (default 127.0.0.1 and a free port)",
    )
    start.add_argument(
        "--no-dashboard",
        dest="dashboard",
        action="store_const",
        const="off",
        help="the controller serves no dashboard",
    )
    engines = csub.add_parser("engines", help="add N engines to a running cluster")
    cc.add_cluster_options(engines, checked, names)
    stop = csub.add_parser("stop", help="stop a cluster and every engine added to it")
    stop.add_argument("--all", action="store_true", help="stop every recorded cluster")
    lst = csub.add_parser("list", help="list running clusters")
    status = csub.add_parser(
        "status", help="a running cluster's engines and refused messages by process and reason"
    )
    status.add_argument("--json", action="store_true", help="the status as one JSON object")
    for sp in (start, engines, status):
        _profile(sp)
    for sp in (stop, lst):  # without --profile: every profile (list, stop --all)
        _profile(sp, default=None)
    for sp in (start, engines, stop, status):
        _cluster_id(sp)
    status.set_defaults(func=cc.cluster_status)
    start.set_defaults(func=cc.cluster_start)
    engines.set_defaults(func=cc.cluster_engines)
    stop.set_defaults(func=cc.cluster_stop)
    lst.set_defaults(func=cc.cluster_list)

    profile = sub.add_parser("profile", help="create a profile (settings, security, logs)")
    psub = profile.add_subparsers(dest="action", required=True, parser_class=Parser)
    create = psub.add_parser("create", help="make a profile directory with a commented config")
    create.add_argument("name", type=checked(names.profile_name))
    create.set_defaults(func=cc.profile_create)

    config = sub.add_parser("config", help="show the effective settings")
    config_sub = config.add_subparsers(dest="action", required=True, parser_class=Parser)
    show = config_sub.add_parser("show", help="each setting, its value and where it came from")
    _profile(show)
    show.set_defaults(func=cc.config_show)

    smoke = sub.add_parser("smoke", help="check that a cluster runs jobs (exit 0 if so)")
    _profile(smoke)
    smoke.add_argument("--file", "-f", help="client connection file (default: the profile's)")
    smoke.add_argument(
        "--engines", type=checked(names.engine_count), default=1, help="engines to wait for"
    )
    smoke.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    smoke.add_argument(
        "--job",
        choices=("check", "full"),
        default="check",
        help="check: a task per engine and a map; full: a job that survives a lost engine "
        "(hold, map, scatter/gather, communicator allreduce, a result from the store)",
    )
    smoke.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="full job: seconds a task holds each engine first (kill one to see EngineError)",
    )
    smoke.set_defaults(func=cc.smoke)

    ctl = sub.add_parser(
        "controller", help="run a controller (hub and schedulers) here", add_help=False
    )
    ctl.set_defaults(func=None, delegate="zpar.hub.__main__")
    eng = sub.add_parser("engine", help="run one engine here", add_help=False)
    eng.set_defaults(func=None, delegate="zpar.engine.__main__")
    amuse = sub.add_parser(
        "amuse-worker",
        help="serve typed functions to an AMUSE script (its sockets channel's worker)",
        add_help=False,
    )
    amuse.set_defaults(func=None, delegate="zpar.typed.amuse")
    imp = sub.add_parser("impi-server", help="run an IMPI rendezvous server", add_help=False)
    imp.set_defaults(func=None, delegate="zpar.comm.impi_server")
    top = sub.add_parser(
        "top", help="a running cluster's engines, queues and failures, live", add_help=False
    )
    top.set_defaults(func=None, delegate="zpar.dashboard.top")
    conf = sub.add_parser("conformance", help="check a server's protocol", add_help=False)
    conf.set_defaults(func=None, delegate="zpar.comm.conformance")
    return p


_DELEGATES = {
    "controller": "zpar.hub.__main__",
    "engine": "zpar.engine.__main__",
    "impi-server": "zpar.comm.impi_server",  # issue 16: a byte-exact IMPI server
    "conformance": "zpar.comm.conformance",  # issue 16: `conformance impi HOST:PORT`
    "top": "zpar.dashboard.top",  # issue 29: the dashboard in a terminal
}


#: (command, action) that may create the profile they name.
_MAKE_PROFILE = {("cluster", "start"), ("profile", "create")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `zpar controller …`, `zpar engine …` and the comm tools hand their arguments to the
    # parser of the module that does the work.
    if argv and argv[0] in _DELEGATES:
        import importlib

        mod = importlib.import_module(_DELEGATES[argv[0]])
        return int(mod.main(argv[1:]) or 0)
    if argv and argv[0] == "amuse-worker":
        from zpar.typed.amuse import worker_main

        return worker_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        # only `profile create` and `cluster start` make a profile: a typo is refused
        if (
            getattr(args, "profile", None)
            and (args.command, getattr(args, "action", None)) not in _MAKE_PROFILE
        ):
            from zpar.cluster.connection import existing_profile

            try:
                existing_profile(args.profile)
            except ValueError as e:
                print(f"zpar {args.command}: {e}", file=sys.stderr)
                return RET_NOT_FOUND
        return int(args.func(args, argv) or 0)
    except (ValueError, ZparError, OSError) as e:  # one line, never a traceback
        print(f"zpar {args.command}: {e}", file=sys.stderr)
        return RET_ERROR


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zpar")
    except PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
