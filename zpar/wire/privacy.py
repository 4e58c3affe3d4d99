"""What keeps a cluster's traffic to the people holding its key, short of Curve.

* **IOPub topic.** Engines publish their output under a topic derived from the cluster key;
  the controller's IOPub relay admits only subscriptions to exactly that topic (hub.iopubgate),
  so a local process without the key that subscribes to everything receives nothing. On
  loopback or a private network this is the guard; across networks use ``--curve``
  (the topic travels in clear, like every frame without Curve).
* **Exposure.** Which addresses a bind reaches, so that a controller listening beyond
  loopback without Curve can say so, naming each one, and refuse ``--insecure`` there.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from zpar.constants import WILDCARDS
from zpar.errors import ExposureRefused


def iopub_topic(key: str | bytes | None) -> bytes:
    """The IOPub topic of a cluster: 32 hex characters keyed by its key; b"" without one
    (an ``--insecure`` cluster, where anyone may read anything)."""
    if not key:
        return b""
    k = key.encode("ascii") if isinstance(key, str) else key
    return hmac.new(k, b"zpar iopub topic", hashlib.sha256).hexdigest()[:32].encode("ascii")


def is_loopback(ip: str) -> bool:
    """True for addresses only this host can reach (127/8, ::1, localhost)."""
    if ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False  # a host name: it resolves to something others may reach


def exposed_addresses(ip: str) -> list[str]:
    """The non-loopback addresses a controller bound on ``ip`` listens on: every interface's
    for a wildcard, else ``ip`` itself unless it is a loopback address."""
    if ip not in WILDCARDS:
        return [] if is_loopback(ip) else [ip]
    import psutil  # only for a wildcard bind

    out = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name in ("AF_INET", "AF_INET6"):
                host = a.address.split("%", 1)[0]
                if not is_loopback(host) and host not in out:
                    out.append(host)
    return out or ["0.0.0.0 (every interface)"]


def check_exposure(ip: str, *, curve: bool, insecure: bool, force: bool) -> str | None:
    """A warning to log when a controller on ``ip`` is reachable from other hosts without
    Curve (None when it is not); raises ExposureRefused for ``--insecure`` there unless
    ``force``."""
    exposed = exposed_addresses(ip)
    if not exposed or curve:
        return None
    where = ", ".join(exposed)
    if insecure and not force:
        raise ExposureRefused(
            f"--insecure on {ip} would let anyone who reaches {where} run code as this user; "
            "bind 127.0.0.1, or add --force if this network is yours alone"
        )
    what = "without a key" if insecure else "without --curve"
    return (
        f"the controller listens on {where} {what}: its traffic (task code, arguments, "
        "results) crosses the network readable by anyone on the path; use --curve "
        "(docs/security.md)"
    )


def dashboard_warning(address: str) -> str | None:
    """The warning for a dashboard other hosts can reach (None on loopback or off): its
    token keeps strangers out, but the page and its token cross the network in clear."""
    from zpar.cluster.names import DASHBOARD_OFF, split_address

    if address == DASHBOARD_OFF:
        return None
    host = split_address(address)[0]
    exposed = exposed_addresses(host)
    if not exposed:
        return None
    return (
        f"the dashboard listens on {', '.join(exposed)}: anyone on the path can read the "
        "page and its token (plain HTTP); keep it on 127.0.0.1 and reach it through an ssh "
        "tunnel (docs/dashboard.md)"
    )
