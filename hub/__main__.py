"""``python -m zpar.hub`` / ``zpar controller``: run a controller (hub, relays, scheduler)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import zmq

from zpar.cluster.argparsing import Parser, checked
from zpar.cluster.names import (
    DASHBOARD_OFF,
    cluster_id,
    dashboard_address,
    log_level,
    profile_name,
)
from zpar.cluster.ownership import ControllerLock
from zpar.cluster.settings import CONTROLLER_PORTS, convert, explicit
from zpar.cluster.settings import load as load_settings
from zpar.constants import (
    CLIENT_QUEUE_LIMIT,
    DEFAULT_PROFILE,
    HEARTBEAT_MAX_MISSES,
    HEARTBEAT_PERIOD,
    QUEUE_BUDGET,
    TASK_HWM,
    TASK_SCHEME,
    TASK_SCHEMES,
)
from zpar.errors import ClusterBusy, ExposureRefused, ZparError
from zpar.logs import setup_logging


def _at_least_one(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError(f"expected an int >= 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="zpar controller",
        description="Run a zpar controller: hub, relays and task scheduler.",
    )
    p.add_argument("--ip", default="127.0.0.1", help="interface to bind (0.0.0.0: all)")
    p.add_argument(
        "--location",
        default="",
        help="host name engines and clients connect to (default: --ip, or this host's name "
        "when binding all interfaces)",
    )
    p.add_argument("--profile", default=DEFAULT_PROFILE, type=checked(profile_name))
    p.add_argument("--cluster-id", default="", type=checked(cluster_id))
    p.add_argument("--url-file-dir", default="", help="where to write the connection files")
    p.add_argument("--hb-period", type=float, default=HEARTBEAT_PERIOD, help="seconds")
    p.add_argument(
        "--hb-misses", type=int, default=HEARTBEAT_MAX_MISSES, help="missed beats before death"
    )
    p.add_argument("--scheme", default=TASK_SCHEME, choices=TASK_SCHEMES, help="load balancing")
    p.add_argument("--hwm", type=int, default=TASK_HWM, help="tasks per engine (0: unlimited)")
    p.add_argument(
        "--client-queue",
        type=checked(_at_least_one),
        default=CLIENT_QUEUE_LIMIT,
        help="unfinished load-balanced tasks held per client (more are refused)",
    )
    p.add_argument(
        "--queue-budget",
        type=checked(_at_least_one),
        default=QUEUE_BUDGET,
        help="bytes of unfinished tasks above which the task scheduler stops reading",
    )
    p.add_argument(
        "--insecure", action="store_true", help="no key, no signatures (trusted networks only)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="allow --insecure on an address other hosts can reach (refused without it)",
    )
    p.add_argument(
        "--curve",
        action="store_true",
        help="encrypt and authenticate every connection with CurveZMQ (per-cluster keys in "
        "the connection files); use it whenever a network you do not control carries the "
        "cluster's traffic",
    )
    p.add_argument(
        "--db",
        default="",
        help="task store: an SQLAlchemy URL (sqlite:///…, postgresql://…), 'memory', or "
        "empty for an SQLite file in the profile directory",
    )
    p.add_argument("--log-level", default="INFO", type=checked(log_level))
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help=f"first of {CONTROLLER_PORTS} consecutive tcp ports to bind, in the order of "
        "docs/deploy.md (0: random ports)",
    )
    p.add_argument(
        "--dashboard",
        default="127.0.0.1:0",
        type=checked(dashboard_address),
        metavar="ADDR",
        help="HOST:PORT of the live dashboard page (default 127.0.0.1 and a free port; "
        "'off': none). Another interface than loopback is warned about, as --ip is",
    )
    p.add_argument(
        "--no-dashboard",
        dest="dashboard",
        action="store_const",
        const=DASHBOARD_OFF,
        help="serve no dashboard",
    )
    p.add_argument(
        "--key",
        default="",
        help="fixed cluster key (default: a new random one); other users can read a "
        "command line, prefer ZPAR_KEY or the profile",
    )
    return p


#: Settings (zpar.cluster.settings) the controller takes from its profile and ZPAR_* variables
#: when no flag gives them.
CONTROLLER_SETTINGS = (
    "ip", "location", "hb_period", "hb_misses", "scheme", "hwm", "insecure", "db", "log_level",
    "curve", "port", "key", "client_queue", "queue_budget", "dashboard",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    # flag > ZPAR_<NAME> > the profile's config.toml > default: settings become the defaults
    known, _ = p.parse_known_args(argv)
    try:
        settings = load_settings(known.profile)
    except ValueError as e:
        p.error(str(e))
    p.set_defaults(**{k: v for k, v in explicit(settings).items() if k in CONTROLLER_SETTINGS})
    args = p.parse_args(argv)
    if args.hb_period <= 0:
        p.error(f"--hb-period must be > 0, got {args.hb_period}")
    if args.hb_misses < 1:
        p.error(f"--hb-misses must be >= 1, got {args.hb_misses}")
    if args.hwm < 0:
        p.error(f"--hwm must be >= 0, got {args.hwm}")
    try:
        convert("port", args.port, "flag --port")
        convert("key", args.key, "flag --key")
    except ValueError as e:
        p.error(str(e))
    if args.key and args.insecure:
        p.error("a cluster key (setting key) and --insecure (no key) exclude each other")
    from zpar.wire.privacy import check_exposure

    try:
        exposure = check_exposure(
            args.ip, curve=args.curve, insecure=args.insecure, force=args.force
        )
    except ExposureRefused as e:
        sys.stderr.write(f"zpar controller: {e}\n")
        return 2
    from zpar.wire.privacy import dashboard_warning

    setup_logging("hub", args.log_level)
    if exposure:
        logging.getLogger("zpar.hub").warning("%s", exposure)
    dashboard_exposure = dashboard_warning(args.dashboard)
    if dashboard_exposure:
        logging.getLogger("zpar.hub").warning("%s", dashboard_exposure)
    # every file the controller and its scheduler create (task store and its journals,
    # run directory, connection files) is the owner's only
    os.umask(0o077)
    from .schedproc import ControllerConfig, check_ports_free, launch_scheduler

    config = ControllerConfig(
        ip=args.ip,
        location=args.location,
        profile=args.profile,
        cluster_id=args.cluster_id,
        url_file_dir=args.url_file_dir,
        hb_period=args.hb_period,
        hb_misses=args.hb_misses,
        scheme=args.scheme,
        hwm=args.hwm,
        client_queue=args.client_queue,
        queue_budget=args.queue_budget,
        insecure=args.insecure,
        curve=args.curve,
        log_level=args.log_level,
        db=args.db,
        port=args.port,
        key=args.key,
        dashboard="" if args.dashboard == DASHBOARD_OFF else args.dashboard,
    )
    # one controller per profile and cluster id: a second one would overwrite (and on exit
    # delete) the first one's connection files
    try:
        lock = ControllerLock(args.profile, args.cluster_id).acquire()
    except (ClusterBusy, OSError) as e:
        sys.stderr.write(f"zpar controller: {e}\n")
        return 1
    try:
        if args.port:  # one clear error naming the port, before anything binds
            try:
                check_ports_free(args.ip, args.port)
            except OSError as e:
                sys.stderr.write(f"zpar controller: {e}\n")
                return 1
        # the task scheduler first: its start-up overlaps this process's imports (W1)
        try:
            launch = launch_scheduler(config)
        except OSError as e:
            sys.stderr.write(f"zpar controller: cannot start the task scheduler: {e}\n")
            return 1
        from zpar.cluster.connection import CLIENT_FILE, security_dir
        from zpar.cluster.ownership import stop_self, watch_owner
        from zpar.cluster.registry import forget_controller, record_controller

        from .controller import run_controller

        launched = watch_owner(stop_self)  # started by a launcher: stop when it dies
        url_dir = Path(args.url_file_dir) if args.url_file_dir else security_dir(args.profile)
        # listed by `zpar cluster list`, stopped by the command ClusterBusy prints
        record_controller(args.profile, args.cluster_id, url_dir / CLIENT_FILE, launched)
        try:
            return run_controller(config, launch)
        except (ZparError, zmq.ZMQError, OSError) as e:
            sys.stderr.write(f"zpar controller: {e}\n")
            return 1
        finally:
            forget_controller(args.profile, args.cluster_id)
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
