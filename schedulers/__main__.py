"""``python -m zpar.schedulers``: the task scheduler process, started by the controller.

The cluster key comes in a file named by $ZPAR_KEY_FILE (never on the command line, where
``ps`` would show it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import zmq

from zpar.constants import (
    CLIENT_QUEUE_LIMIT,
    CURVE_FILE_ENV,
    KEY_FILE_ENV,
    QUEUE_BUDGET,
    TASK_HWM,
    TASK_SCHEME,
    TASK_SCHEMES,
)
from zpar.logs import setup_logging
from zpar.profiling import profiled
from zpar.wire import Session


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zpar-scheduler", description=__doc__)
    p.add_argument("--monitor", required=True, help="hub monitor address to connect")
    p.add_argument("--events", required=True, help="address to bind for hub engine events")
    p.add_argument("--ip", default="127.0.0.1", help="interface to bind for clients and engines")
    p.add_argument("--scheme", default=TASK_SCHEME, choices=TASK_SCHEMES)
    p.add_argument("--hwm", type=int, default=TASK_HWM)
    p.add_argument("--client-queue", type=int, default=CLIENT_QUEUE_LIMIT)
    p.add_argument("--queue-budget", type=int, default=QUEUE_BUDGET)
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--ipc-dir", default=None, help="also bind ipc twins in this directory")
    p.add_argument("--client-port", type=int, default=0, help="tcp port for clients (0: any)")
    p.add_argument("--engine-port", type=int, default=0, help="tcp port for engines (0: any)")
    p.add_argument("--generation", type=int, default=0, help="schedulers that died before")
    p.add_argument(
        "--parent-pid", type=int, default=0, help="the controller's pid (exit when it is gone)"
    )
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging("scheduler", args.log_level)
    key = None
    if not args.insecure:
        path = os.environ.get(KEY_FILE_ENV)
        if not path:
            sys.stderr.write(
                f"zpar scheduler: ${KEY_FILE_ENV} is not set and --insecure not given\n"
            )
            return 2
        try:
            key = Path(path).read_text().strip()
        except OSError as e:
            sys.stderr.write(f"zpar scheduler: cannot read the key file {path}: {e}\n")
            return 2
    from .quota import QueueQuota
    from .task import TaskScheduler

    parent = args.parent_pid or os.getppid()
    if os.getppid() != parent:  # the controller died while this process started
        sys.stderr.write(f"zpar scheduler: controller pid {parent} is gone; exiting\n")
        return 1
    curve = zap = None
    if os.environ.get(CURVE_FILE_ENV):
        from zpar.wire.curve import CurveKeys, ZapAuthenticator

        try:
            curve = CurveKeys.read(os.environ[CURVE_FILE_ENV])
        except (OSError, ValueError, TypeError, KeyError) as e:
            sys.stderr.write(f"zpar scheduler: cannot read the Curve key file: {e}\n")
            return 2
        zap = ZapAuthenticator(zmq.Context.instance(), {curve.client_public})
    try:
        scheduler = TaskScheduler(
            Session(key, allow_insecure=args.insecure),
            ip=args.ip,
            monitor=args.monitor,
            events=args.events,
            scheme=args.scheme,
            hwm=args.hwm,
            ipc_dir=args.ipc_dir,
            curve=curve,
            ports=(args.client_port, args.engine_port),
            generation=args.generation,
            quota=QueueQuota(per_client=args.client_queue, budget=args.queue_budget),
        )
    except (ValueError, zmq.ZMQError) as e:
        sys.stderr.write(f"zpar scheduler: {e}\n")
        return 1

    def stop(*_: object) -> None:
        scheduler.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        scheduler.announce()
        with profiled("scheduler"):
            scheduler.run(parent_pid=parent)
    finally:
        scheduler.close()
        if zap is not None:
            zap.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
