"""Checks of the names and values users type (profile, cluster id, log level, counts).

Each check raises ValueError with one line naming the bad value, so every entry point
(the `zpar` command, `zpar controller`, `zpar engine`, ``zpar.Cluster``) reports it the same
way and nothing derived from a name can point outside the profile directory.
"""

from __future__ import annotations

import logging
import re

#: Profile and cluster names become path components: letters, digits, '-', '_' and '.'
#: (not first), at most 64 characters. No '/', no '..', no leading dot, no empty name.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or ".." in value:
        raise ValueError(
            f"invalid {what} {value!r}: use letters, digits, '-', '_' and '.' "
            "(not first, no '..'), at most 64 characters"
        )
    return value


def profile_name(value: str) -> str:
    return check_name(value, "profile name")


def cluster_id(value: str) -> str:
    """A cluster id; '' is allowed (the profile's default cluster)."""
    return value if value == "" else check_name(value, "cluster id")


def log_level(value: str | int) -> str:
    """A level's name: ``"debug"``, ``"DEBUG"`` or ``10`` (logging.DEBUG) give "DEBUG"."""
    if isinstance(value, int) and not isinstance(value, bool):
        name = logging.getLevelName(value)
        if isinstance(name, str) and not name.startswith("Level "):
            return name
        raise ValueError(f"invalid log level {value!r}: use one of {', '.join(LOG_LEVELS)}")
    level = str(value).upper()
    if level not in LOG_LEVELS and not isinstance(logging.getLevelName(level), int):
        raise ValueError(f"invalid log level {value!r}: use one of {', '.join(LOG_LEVELS)}")
    return level


def engine_count(value: str | int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"invalid number of engines {value!r}: use an integer >= 0") from None
    if n < 0 or n != float(value):
        raise ValueError(f"invalid number of engines {value!r}: use an integer >= 0")
    return n


#: The dashboard setting's value for no dashboard.
DASHBOARD_OFF = "off"


def dashboard_address(value: str) -> str:
    """``HOST:PORT`` (``[v6]:PORT``; port 0: any free one) or ``off``; ValueError naming
    what is wrong."""
    value = str(value).strip()
    if value.lower() in (DASHBOARD_OFF, ""):
        return DASHBOARD_OFF
    split_address(value)
    return value


def split_address(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), the brackets of an IPv6 host removed."""
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"invalid dashboard address {addr!r}: use HOST:PORT (e.g. 127.0.0.1:8787, "
            "port 0 for any free one) or 'off'"
        )
    return host, int(port)
