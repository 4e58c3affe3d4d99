"""Logging set-up shared by every zpar process: one format, the process role in each line."""

from __future__ import annotations

import logging
import sys


def setup_logging(role: str, level: str | int = "INFO", stream=None) -> None:
    """Configure the root logger of a zpar process; ``role`` is e.g. 'hub' or 'engine.3'."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s.%(msecs)03d [{role}] %(levelname)s %(name)s: %(message)s", "%H:%M:%S"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if isinstance(level, int) else level.upper())
