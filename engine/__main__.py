"""``python -m zpar.engine``: run one engine against the controller of a connection file."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid

from zpar.cluster.argparsing import Parser, checked
from zpar.cluster.connection import (
    default_url_file,
    stopped_on_purpose,
    wait_for_connection_file,
    wait_for_new_controller,
)
from zpar.cluster.names import log_level, profile_name
from zpar.constants import DEFAULT_PROFILE, ENGINE_RECONNECT_WINDOW
from zpar.errors import TimeoutError, ZparError
from zpar.logs import setup_logging
from zpar.sharedmem.carrier import release_all

#: Exit codes: a normal stop (shutdown, SIGTERM, controller gone) / could not start or serve.
EXIT_OK = 0
EXIT_FAILED = 1


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="zpar engine", description="Run one zpar engine and register it with a controller."
    )
    p.add_argument(
        "--file",
        "-f",
        help="engine connection file (default: the profile's security/zpar-engine.json)",
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        type=checked(profile_name),
        help="profile name (default: default)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for the connection file to appear (a controller starting up)",
    )
    p.add_argument(
        "--reconnect",
        type=float,
        default=ENGINE_RECONNECT_WINDOW,
        metavar="SECONDS",
        help="when the controller goes silent, wait this long for a new one to write the "
        f"connection file and register with it under the same id (default "
        f"{ENGINE_RECONNECT_WINDOW:g}; 0: exit at once)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=checked(log_level),
        help="DEBUG, INFO, WARNING… (default INFO)",
    )
    return p


#: Environment variable through which a restarting engine asks the hub for its old id.
RESTART_ID_ENV = "ZPAR_ENGINE_ID"
#: Environment variable naming the pid of the controller an engine lost: it waits for a
#: connection file of another controller.
LOST_CONTROLLER_ENV = "ZPAR_LOST_CONTROLLER"


def _requested_id() -> int:
    value = os.environ.get(RESTART_ID_ENV, "")
    try:
        return int(value) if value else -1
    except ValueError:
        logging.getLogger("zpar.engine").warning("ignored %s=%r: not an int", RESTART_ID_ENV, value)
        return -1


def _restart(argv: list[str], engine_id: int, lost_controller: int = 0) -> None:
    """Become a fresh engine in this same process (same pid, so launchers still track it):
    a new interpreter, a new namespace, registered again under the same id.
    ``lost_controller``: the pid of a controller that went silent; wait for another."""
    logging.getLogger("zpar.engine").info("engine %d: restarting", engine_id)
    release_all()  # its pid lives on: the owners' sweep would not free its holds
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    env = dict(os.environ, **{RESTART_ID_ENV: str(engine_id)})
    if lost_controller:
        env[LOST_CONTROLLER_ENV] = str(lost_controller)
    os.execve(sys.executable, [sys.executable, "-P", "-m", "zpar.engine", *argv], env)


def main(argv: list[str] | None = None) -> int:
    if sys.flags.safe_path and os.getcwd() not in sys.path:
        # started with -P so that zpar came from the install, not a source tree in the cwd;
        # now that it is imported, user code finds the cwd's modules as under `python -m`
        sys.path.insert(0, os.getcwd())
    args = build_parser().parse_args(argv)
    level = args.log_level.upper()
    setup_logging("engine", level)
    import zmq

    from zpar.cluster.ownership import stop_self, watch_owner

    from .engine import Engine

    watch_owner(stop_self)  # started by a launcher: stop when it dies

    try:
        path = args.file or default_url_file(args.profile, "engine")
        if args.wait:
            logging.getLogger("zpar.engine").info("waiting up to %g s for %s", args.wait, path)
        lost = os.environ.pop(LOST_CONTROLLER_ENV, "")
        if lost and args.reconnect > 0:
            info = wait_for_new_controller(path, int(lost), args.reconnect)
            if info is None:
                logging.getLogger("zpar.engine").warning(
                    "no new controller wrote %s within %g s of losing controller pid %s; exiting",
                    path,
                    args.reconnect,
                    lost,
                )
                return EXIT_OK
        else:
            info = wait_for_connection_file(path, args.wait)
        restart_argv = sys.argv[1:] if argv is None else argv
        # reconnecting: a controller too busy to answer is asked again until the window ends
        until = time.monotonic() + args.reconnect if lost else 0.0
        # one identity for every attempt: the hub answers a request it took while this
        # engine had stopped waiting again, instead of holding the id for a dead request
        identity = str(uuid.uuid4())
        while True:
            engine = Engine(
                info,
                log_level=level,
                restartable=True,
                requested_id=_requested_id(),
                engine_uuid=identity,
            )
            # a task stuck past its time_limit: the watchdog thread re-executes the process
            engine.restart_now = lambda e=engine: _restart(restart_argv, e.id)
            try:
                code = engine.run()
                break
            except TimeoutError as e:
                if time.monotonic() >= until:
                    raise
                logging.getLogger("zpar.engine").warning("%s; asking again", e)
                info = wait_for_connection_file(path, max(0.0, until - time.monotonic()))
        if engine.restart:
            _restart(restart_argv, engine.id)
        if engine.unregistered is not None and engine.id >= 0:
            # declared dead while it ran on (stopped, cut off): a fresh engine, same id if free
            _restart(restart_argv, engine.id)
        if engine.controller_lost and args.reconnect > 0 and engine.id >= 0:
            if stopped_on_purpose(path, info.controller_pid or -1):
                logging.getLogger("zpar.engine").info(
                    "engine %s: controller pid %s stopped and removed %s; exiting",
                    engine.id,
                    info.controller_pid,
                    path,
                )
                return code
            # issue 13: found again by a controller restarted on the same profile
            _restart(restart_argv, engine.id, lost_controller=info.controller_pid or -1)
        return code
    except (ZparError, ValueError, zmq.ZMQError) as e:
        sys.stderr.write(f"zpar engine: {e}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
