"""ipyparallel's ``ipyparallel.util`` under zpar: the helpers user code imports from it
(``utc``, ``interactive``, ``progress``, date helpers, small dict types).

Its networking and process helpers (URL disambiguation, random ports, loggers over zmq,
dask workers) belong to ipyparallel's own processes and have no zpar counterpart; see
docs/api.md.
"""

from __future__ import annotations

import logging
import re
import sys
import types
from datetime import UTC, datetime
from typing import Any

utc = UTC

__all__ = [
    "Namespace",
    "ReverseDict",
    "compare_datetimes",
    "ensure_timezone",
    "int_keys",
    "interactive",
    "is_ip",
    "is_url",
    "progress",
    "split_url",
    "utc",
    "utcnow",
    "validate_url",
]


class Namespace(dict):
    """A dict whose keys are also attributes."""

    def __getattr__(self, key: str) -> Any:
        if key in self:
            return self[key]
        raise NameError(key)

    def __setattr__(self, key: str, value: Any) -> None:
        if hasattr(dict, key):
            raise KeyError(f"Cannot override dict keys {key!r}")
        self[key] = value


class ReverseDict(dict):
    """A dict also indexed by its values (values must be unique and hashable)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reverse = {v: k for k, v in self.items()}

    def __getitem__(self, key: Any) -> Any:
        try:
            return dict.__getitem__(self, key)
        except KeyError:
            return self._reverse[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in self._reverse:
            raise KeyError(f"Can't have key {key!r} on both sides!")
        dict.__setitem__(self, key, value)
        self._reverse[value] = key

    def pop(self, key: Any) -> Any:  # type: ignore[override]
        value = dict.pop(self, key)
        self._reverse.pop(value)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def interactive(f: Any) -> Any:
    """Make a function behave as if defined in ``__main__``: it travels by value and its
    globals are the engine's namespace (names pushed there are visible to it)."""
    if isinstance(f, types.FunctionType):
        main = sys.modules["__main__"]
        # a closure is kept (ipyparallel's interactive fails on one)
        g = types.FunctionType(f.__code__, main.__dict__, f.__name__, f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        g.__doc__ = f.__doc__
        g.__qualname__ = f.__qualname__
        f = g
    f.__module__ = "__main__"
    return f


def int_keys(dikt: dict[Any, Any]) -> dict[Any, Any]:
    """Turn keys that are numbers written as str back into numbers, in place."""
    for k in list(dikt):
        if not isinstance(k, str):
            continue
        try:
            nk: Any = int(k)
        except ValueError:
            try:
                nk = float(k)
            except ValueError:
                continue
        if nk in dikt:
            raise KeyError(f"already have key {nk!r}")
        dikt[nk] = dikt.pop(k)
    return dikt


def utcnow() -> datetime:
    """A timezone-aware UTC timestamp."""
    return datetime.now(utc)


def ensure_timezone(dt: datetime) -> datetime:
    """``dt`` with the local timezone attached if it has none."""
    if dt.tzinfo is None:
        return dt.astimezone()
    return dt


def compare_datetimes(a: datetime, b: datetime) -> Any:
    """``a - b``, treating a naive datetime as local time when the other is aware."""
    if (a.tzinfo is None) != (b.tzinfo is None):
        a, b = ensure_timezone(a), ensure_timezone(b)
    return a - b


def as_datetime(stamp: Any) -> Any:
    """A zpar timestamp (seconds since the epoch) as an aware UTC datetime; None stays."""
    if stamp is None or isinstance(stamp, datetime):
        return stamp
    return datetime.fromtimestamp(float(stamp), utc)


_URL = re.compile(r"^(tcp|ipc|inproc|pgm|epgm)://.+")


def is_url(url: str) -> bool:
    """True for a zmq URL (``tcp://127.0.0.1:5555``, ``ipc:///tmp/x``)."""
    return isinstance(url, str) and "://" in url


def validate_url(url: str) -> bool:
    """True for a valid zmq URL; a ValueError/TypeError naming what is wrong otherwise."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, not {url!r}")
    if not _URL.match(url):
        raise ValueError(f"invalid url: {url!r} (expected proto://address)")
    proto, addr = url.split("://", 1)
    if proto == "tcp":
        host, _, port = addr.rpartition(":")
        if not host or not port:
            raise ValueError(f"invalid tcp url {url!r}: needs host:port")
        if port != "*":
            try:
                int(port)
            except ValueError:
                raise ValueError(f"invalid port {port!r} in url {url!r}") from None
    return True


def split_url(url: str) -> tuple[str, str, str]:
    """``'tcp://1.2.3.4:5'`` -> ``('tcp', '1.2.3.4', '5')``."""
    proto, addr = url.split("://", 1)
    host, _, port = addr.rpartition(":")
    return proto, host, port


def is_ip(location: str) -> bool:
    """True if ``location`` is an IP address (v4 or v6), not a host name."""
    import ipaddress  # here: every zpar process imports this module

    try:
        ipaddress.ip_address(location)
    except ValueError:
        return False
    return True


_said_no_widgets = False


def _say_no_widgets() -> None:
    global _said_no_widgets
    _said_no_widgets = True
    logging.getLogger("zpar.client").info(
        "ipywidgets is not installed: progress is shown as a text bar "
        "(pip install ipywidgets for a widget)"
    )


def _ipywidgets_available() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def progress(*args: Any, widget: bool | None = None, **kwargs: Any) -> Any:
    """A tqdm progress bar: a widget in a Jupyter kernel with ipywidgets installed, text
    otherwise (without ipywidgets it falls back to text, where tqdm.auto would warn)."""
    if widget is None:
        shell = None
        if "IPython" in sys.modules:
            shell = sys.modules["IPython"].get_ipython()
        in_kernel = getattr(shell, "kernel", None) is not None
        widget = in_kernel and _ipywidgets_available()
        if in_kernel and not widget and not _said_no_widgets:
            _say_no_widgets()
    if widget:
        from tqdm.notebook import tqdm as bar
    else:
        from tqdm import tqdm as bar

        kwargs.setdefault("file", sys.stdout)
    return bar(*args, **kwargs)
