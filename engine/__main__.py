"""``python -m zpar.engine``: run one engine against the controller of a connection file."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from zpar.argparsing import Parser, checked
from zpar.connection import default_url_file, wait_for_connection_file
from zpar.constants import DEFAULT_PROFILE
from zpar.errors import ZparError
from zpar.logs import setup_logging
from zpar.names import log_level, profile_name

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
        "--log-level",
        default="INFO",
        type=checked(log_level),
        help="DEBUG, INFO, WARNING… (default INFO)",
    )
    return p


#: Environment variable through which a restarting engine asks the hub for its old id.
RESTART_ID_ENV = "ZPAR_ENGINE_ID"


def _requested_id() -> int:
    value = os.environ.get(RESTART_ID_ENV, "")
    try:
        return int(value) if value else -1
    except ValueError:
        logging.getLogger("zpar.engine").warning("ignored %s=%r: not an int", RESTART_ID_ENV, value)
        return -1


def _restart(argv: list[str], engine_id: int) -> None:
    """Become a fresh engine in this same process (same pid, so launchers still track it):
    a new interpreter, a new namespace, registered again under the same id."""
    logging.getLogger("zpar.engine").info("engine %d: restarting", engine_id)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    env = dict(os.environ, **{RESTART_ID_ENV: str(engine_id)})
    os.execve(sys.executable, [sys.executable, "-m", "zpar.engine", *argv], env)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = args.log_level.upper()
    setup_logging("engine", level)
    import zmq

    from .engine import Engine

    try:
        path = args.file or default_url_file(args.profile, "engine")
        if args.wait:
            logging.getLogger("zpar.engine").info("waiting up to %g s for %s", args.wait, path)
        info = wait_for_connection_file(path, args.wait)
        engine = Engine(info, log_level=level, restartable=True, requested_id=_requested_id())
        restart_argv = sys.argv[1:] if argv is None else argv
        # a task stuck past its time_limit: the watchdog thread re-executes the process
        engine.restart_now = lambda: _restart(restart_argv, engine.id)
        code = engine.run()
        if engine.restart:
            _restart(sys.argv[1:] if argv is None else argv, engine.id)
        return code
    except (ZparError, ValueError, zmq.ZMQError) as e:
        sys.stderr.write(f"zpar engine: {e}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
