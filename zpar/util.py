"""ipyparallel's ``ipyparallel.util`` under zpar: the helpers user code imports from it
(``utc``, ``interactive``, ``progress``, date helpers, small dict types, zmq URL and
address helpers).

Its process helpers (loggers over zmq, signal relays, dask workers) belong to ipyparallel's
own processes and have no zpar counterpart; see docs/api.md.
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
    "disambiguate_ip_address",
    "disambiguate_url",
    "ensure_timezone",
    "int_keys",
    "integer_loglevel",
    "interactive",
    "ip_for_host",
    "is_ip",
    "is_url",
    "progress",
    "select_random_ports",
    "split_url",
    "utc",
    "utcnow",
    "validate_url",
    "validate_url_container",
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


def validate_url_container(container: Any) -> bool:
    """validate_url over a URL, or a (nested) list or dict of them."""
    if isinstance(container, str):
        return validate_url(container)
    for element in container.values() if isinstance(container, dict) else container:
        validate_url_container(element)
    return True


def ip_for_host(host: str) -> str:
    """An IP address of ``host`` (``host`` itself, with a RuntimeWarning, if none)."""
    import socket
    import warnings

    try:
        return socket.gethostbyname_ex(host)[2][0]
    except Exception as e:
        warnings.warn(f"could not determine the IPs of {host}: {e}", RuntimeWarning, stacklevel=2)
        return host


def _local_ips() -> set[str]:
    """The addresses of this machine's interfaces (loopback included)."""
    import socket

    import psutil

    return {
        a.address.split("%")[0]
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family in (socket.AF_INET, socket.AF_INET6)
    }


def disambiguate_ip_address(ip: str, location: str | None = None) -> str:
    """An address to connect to for one a server bound (ipyparallel's): '0.0.0.0' or '*'
    becomes 127.0.0.1 when ``location`` (an IP or host name of the server) is this
    machine or not given, else ``location``; any other address is returned as it is."""
    import socket

    if ip not in ("0.0.0.0", "*"):
        return ip
    if not location or location == socket.gethostname():
        return "127.0.0.1"
    address = location if is_ip(location) else ip_for_host(location)
    return "127.0.0.1" if address in _local_ips() else address


def disambiguate_url(url: str, location: str | None = None) -> str:
    """``tcp://*:5555`` -> ``tcp://127.0.0.1:5555`` (or the ``location``'s address when
    that is another machine); URLs that are not tcp come back unchanged."""
    try:
        proto, ip, port = split_url(url)
    except ValueError:
        return url
    if not ip or not port:
        return url
    return f"{proto}://{disambiguate_ip_address(ip, location)}:{port}"


def select_random_ports(n: int) -> list[int]:
    """n distinct TCP ports free on this machine now (the OS picks them)."""
    import socket

    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind(("", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def integer_loglevel(loglevel: int | str) -> int:
    """10 from 10, "10" or "DEBUG"."""
    try:
        return int(loglevel)
    except ValueError:
        level = getattr(logging, str(loglevel).upper(), None)
        if not isinstance(level, int):
            raise ValueError(f"unknown log level {loglevel!r}") from None
        return level


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
