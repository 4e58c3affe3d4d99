"""Every setting of a cluster, where each value came from, and one frozen Settings per process.

A value comes from, highest first: a command-line flag (or a ``zpar.Cluster(...)`` keyword),
the environment (``ZPAR_<NAME>``, e.g. ``ZPAR_HWM=4``), the profile's ``config.toml``, the
default below. The profile file has one TOML table per part of the cluster; inside a table
a setting is named without its table's prefix (``[ssh] hosts`` is the setting ``ssh_hosts``).
A bad value is one ValueError naming the setting and where it came from.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from zpar.cluster import names
from zpar.constants import (
    CLIENT_QUEUE_LIMIT,
    HEARTBEAT_MAX_MISSES,
    HEARTBEAT_PERIOD,
    QUEUE_BUDGET,
    TASK_HWM,
    TASK_SCHEME,
    TASK_SCHEMES,
)

#: Name of a profile's settings file.
CONFIG_FILE = "config.toml"
#: Prefix of the environment variables that set a setting.
ENV_PREFIX = "ZPAR_"
#: Engine launchers `--engines` accepts (zpar.cluster.launchers has one module each).
LAUNCHERS = ("local", "mpi", "ssh", "slurm", "pbs")
#: Where a value came from, lowest precedence first.
SOURCES = ("default", "profile", "environment", "flag")


def _positive(x: float) -> bool:
    return x > 0


@dataclass(frozen=True, slots=True)
class Spec:
    """One setting: its table in config.toml, its type, a check and one line of help."""

    table: str
    kind: type
    help: str
    check: Any = None  # callable returning a clean value or raising ValueError
    choices: tuple = ()


#: Number of tcp ports a controller binds; ``port = P`` takes P .. P + CONTROLLER_PORTS - 1.
CONTROLLER_PORTS = 12
#: Settings `zpar config show` never prints.
SECRET_SETTINGS = ("key",)


def _first_port(port: int) -> bool:
    if port and not 1024 <= port <= 65536 - CONTROLLER_PORTS:
        raise ValueError(f"expected 0 (random) or 1024..{65536 - CONTROLLER_PORTS}")
    return True


def _key(key: str) -> bool:
    # signatures use the key's ASCII bytes; a short one is guessable
    if key and not (key.isascii() and key.isprintable() and len(key.split()) == 1):
        raise ValueError("expected printable ASCII without spaces, e.g. 64 hex digits")
    if key and len(key) < 16:
        raise ValueError("expected at least 16 characters (e.g. `openssl rand -hex 32`)")
    return True


def _hosts(value: Any) -> dict[str, int]:
    """``{"host": n}`` from TOML, or ``"host=n,user@other:2222=2"`` from a flag or variable
    (a host without ``=n`` runs one engine)."""
    if isinstance(value, str):
        out: dict[str, int] = {}
        for item in filter(None, (s.strip() for s in value.split(","))):
            host, _, n = item.partition("=")
            out[host.strip()] = int(n) if n else 1
        value = out
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, int) and v >= 0 for k, v in value.items()
    ):
        raise ValueError("expected host = engine count pairs, e.g. {node1 = 4, node2 = 2}")
    return dict(value)


SPECS: dict[str, Spec] = {
    # controller
    "ip": Spec("controller", str, "interface the controller binds (0.0.0.0: all)"),
    "location": Spec(
        "controller", str, "host name engines and clients connect to (default: ip or hostname)"
    ),
    "port": Spec(
        "controller",
        int,
        f"first of {CONTROLLER_PORTS} consecutive tcp ports the controller binds (0: random; "
        "order in docs/deploy.md)",
        _first_port,
    ),
    "key": Spec(
        "controller", str, "fixed cluster key (empty: a new random one at each start)", _key
    ),
    "db": Spec("controller", str, "task store: '' (SQLite in the profile), 'memory' or a URL"),
    "hb_period": Spec("controller", float, "seconds between heartbeats", _positive),
    "hb_misses": Spec("controller", int, "missed heartbeats before an engine is dead", _positive),
    "scheme": Spec("controller", str, "load-balancing scheme", choices=TASK_SCHEMES),
    "hwm": Spec("controller", int, "unfinished tasks per engine (0: unlimited)", lambda x: x >= 0),
    "client_queue": Spec(
        "controller",
        int,
        "unfinished load-balanced tasks the task scheduler holds per client (more are "
        "refused; clients keep a window of 256)",
        _positive,
    ),
    "queue_budget": Spec(
        "controller",
        int,
        "bytes of unfinished tasks, all clients, above which the task scheduler stops "
        "reading submissions",
        _positive,
    ),
    "insecure": Spec("controller", bool, "no key and no signatures (trusted networks only)"),
    "curve": Spec("controller", bool, "CurveZMQ on every connection (docs/security.md)"),
    # a name or logging's int (logging.DEBUG): the check makes it the name
    "log_level": Spec("controller", object, "log level of every process", names.log_level),
    "dashboard": Spec(
        "controller",
        str,
        "HOST:PORT of the controller's dashboard page (port 0: any free one; 'off': none)",
        names.dashboard_address,
    ),
    # engines and the launcher
    "n": Spec("engines", int, "engines `zpar cluster start` starts", lambda x: x >= 0),
    "engines": Spec("engines", str, "how engines are started", choices=LAUNCHERS),
    "timeout": Spec("engines", float, "seconds start waits for every engine", _positive),
    "keep": Spec("engines", bool, "replace engines that die"),
    "python": Spec("engines", str, "python that runs engines (default: this one)"),
    # launchers' own
    "mpi_mpiexec": Spec("mpi", str, "the mpiexec command"),
    "mpi_args": Spec("mpi", list, "extra mpiexec arguments, e.g. ['--oversubscribe']"),
    "ssh_hosts": Spec("ssh", dict, "engine hosts: {host = n}; host may be user@host:port", _hosts),
    "ssh_user": Spec("ssh", str, "ssh login name (default: ssh's own)"),
    "ssh_args": Spec("ssh", list, "extra ssh arguments, e.g. ['-i', '~/.ssh/cluster']"),
    "ssh_python": Spec("ssh", str, "python on the engine hosts"),
    "ssh_remote_dir": Spec("ssh", str, "directory on the engine hosts for connection files"),
    "ssh_tunnel": Spec("ssh", bool, "engines reach the controller through ssh -R tunnels"),
    "batch_queue": Spec("batch", str, "partition (Slurm) or queue (PBS)"),
    "batch_account": Spec("batch", str, "account charged for the job"),
    "batch_walltime": Spec("batch", str, "time limit of the engine job, e.g. 01:00:00"),
    "batch_template": Spec("batch", str, "job script template (default: the built-in one)"),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """The effective settings of one process, with where each value came from."""

    ip: str = "127.0.0.1"
    location: str = ""
    port: int = 0
    key: str = field(default="", repr=False)
    db: str = ""
    hb_period: float = HEARTBEAT_PERIOD
    hb_misses: int = HEARTBEAT_MAX_MISSES
    scheme: str = TASK_SCHEME
    hwm: int = TASK_HWM
    client_queue: int = CLIENT_QUEUE_LIMIT
    queue_budget: int = QUEUE_BUDGET
    insecure: bool = False
    curve: bool = False
    log_level: str = "WARNING"
    dashboard: str = "127.0.0.1:0"
    n: int = 2
    engines: str = "local"
    timeout: float = 60.0
    keep: bool = False
    python: str = ""
    mpi_mpiexec: str = "mpiexec"
    mpi_args: tuple[str, ...] = ()
    ssh_hosts: dict[str, int] = field(default_factory=dict)
    ssh_user: str = ""
    ssh_args: tuple[str, ...] = ()
    ssh_python: str = "python3"
    ssh_remote_dir: str = ".zpar-remote"
    ssh_tunnel: bool = False
    batch_queue: str = ""
    batch_account: str = ""
    batch_walltime: str = ""
    batch_template: str = ""
    profile: str = "default"
    #: setting -> "default" / "profile <file>" / "environment ZPAR_X" / "flag"
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")


def convert(name: str, value: Any, where: str) -> Any:
    """``value`` as setting ``name`` wants it; ValueError naming both and ``where``."""
    spec = SPECS.get(name)
    if spec is None:
        raise ValueError(f"unknown setting {name!r} in {where}; known: {', '.join(SPECS)}")
    try:
        value = _coerce(spec, value)
        if spec.choices and value not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}")
        if spec.check is not None:
            checked = spec.check(value)
            if checked is False:
                raise ValueError("out of range")
            if checked is not True and checked is not None:
                value = checked
    except (ValueError, TypeError) as e:
        shown = "'********'" if name in SECRET_SETTINGS else repr(value)  # never in a log
        raise ValueError(f"setting {name} = {shown} in {where}: {e}") from None
    return value


def _coerce(spec: Spec, value: Any) -> Any:
    kind = spec.kind
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ValueError("expected true or false")
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"expected {what}")
        try:
            number = kind(value)
        except ValueError:
            raise ValueError(f"expected {what}") from None
        if kind is int and isinstance(value, float) and value != number:
            raise ValueError(f"expected {what}")
        return number
    if kind is list:
        if isinstance(value, str):
            return tuple(shlex.split(value))
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of strings")
        return tuple(value)
    if kind is dict or kind is object:
        return value  # the spec's check parses and validates
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def config_path(profile: str) -> Path:
    from zpar.cluster.connection import profile_dir

    return profile_dir(profile, create=False) / CONFIG_FILE


def read_profile(profile: str) -> tuple[dict[str, Any], Path]:
    """The settings a profile's config.toml sets (flat names), and the file's path."""
    path = config_path(profile)
    if not path.exists():
        return {}, path
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    out: dict[str, Any] = {}
    tables = {spec.table for spec in SPECS.values()}
    for table, values in data.items():
        if table not in tables or not isinstance(values, dict):
            raise ValueError(
                f"unknown table [{table}] in {path}; known: {', '.join(sorted(tables))}"
            )
        for key, value in values.items():
            name = key if table in ("controller", "engines") else f"{table}_{key}"
            if name not in SPECS or SPECS[name].table != table:
                raise ValueError(f"unknown setting {key!r} in table [{table}] of {path}")
            out[name] = convert(name, value, str(path))
    return out, path


def load(
    profile: str = "default",
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    origins: dict[str, str] | None = None,
) -> Settings:
    """Settings of ``profile``: flags (None values ignored) > environment > file > default.
    ``origins``: where a flag's value came from, for errors (default "flag --NAME"): e.g.
    "--set hwm=x" or "zpar.Cluster(hwm=...)"."""
    names.profile_name(profile)
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    from_file, path = read_profile(profile)
    for name, value in from_file.items():
        values[name], sources[name] = value, f"profile {path}"
    for name in SPECS:
        var = ENV_PREFIX + name.upper()
        if var in environ:
            values[name] = convert(name, environ[var], f"environment variable {var}")
            sources[name] = f"environment {var}"
    for name, value in (flags or {}).items():
        if value is not None:
            where = (origins or {}).get(name) or f"flag --{name.replace('_', '-')}"
            values[name] = convert(name, value, where)
            sources[name] = "flag"
    return Settings(**values, profile=profile, sources=sources)


def explicit(settings: Settings) -> dict[str, Any]:
    """The settings not at their default: what a process passes on to the ones it starts."""
    return {name: getattr(settings, name) for name in settings.sources}


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """(name, value as TOML would write it, source) for every setting: `zpar config show`."""
    return [
        (f.name, _shown(f.name, getattr(settings, f.name)), settings.source(f.name))
        for f in fields(settings)
        if f.name in SPECS
    ]


def _shown(name: str, value: Any) -> str:
    """The value as TOML; a secret one masked (it may be set, it is never printed)."""
    if name in SECRET_SETTINGS and value:
        return '"********"'
    return _toml_value(value)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _toml_key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else _toml_value(key)


def config_template() -> str:
    """A config.toml with every setting commented out at its default, with its help."""
    defaults = Settings()
    lines = [
        "# zpar profile settings. Uncomment and change what you need.",
        "# Precedence: command-line flag > environment ZPAR_<NAME> > this file > default.",
        "# `zpar config show --profile NAME` prints the effective values and their sources.",
    ]
    table = ""
    for name, spec in SPECS.items():
        if spec.table != table:
            table = spec.table
            lines += ["", f"[{table}]"]
        key = name if table in ("controller", "engines") else name[len(table) + 1 :]
        choices = f" ({' | '.join(spec.choices)})" if spec.choices else ""
        lines.append(f"# {spec.help}{choices}; env {ENV_PREFIX}{name.upper()}")
        lines.append(f"# {key} = {_toml_value(getattr(defaults, name))}")
    return "\n".join(lines) + "\n"


def create_profile(profile: str) -> Path:
    """Make a profile directory: config.toml (if absent), security/ (0700), log/, pid/."""
    from zpar.cluster.connection import profile_dir

    d = profile_dir(profile)
    for sub in ("log", "pid", "clusters"):
        (d / sub).mkdir(exist_ok=True)
    path = d / CONFIG_FILE
    if not path.exists():
        path.write_text(config_template())
    return d
