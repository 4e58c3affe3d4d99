"""Engine side of ``dv.communicator()``: join the hub's rendezvous, exchange where each rank
listens, open the peer links in the dance order, and leave a Communicator in the namespace.

Labels (zpar's own range, ascending as IMPI requires): ZPAR_LABEL_HOSTNAME (which ranks
share a host: ipc between them, and the two-phase collectives), ZPAR_LABEL_ENDPOINTS (the
ipc and tcp addresses of each rank's accepting socket), ZPAR_LABEL_PARAMS (coll_xsize,
coll_maxlinear, ackmark, hiwater, maxdatalen: every rank must bring the same, as IMPI
requires of COLL_XSIZE and COLL_MAXLINEAR).
"""

from __future__ import annotations

import gc
import logging
import socket
from typing import Any
from urllib.parse import urlparse

import msgpack

from zpar.constants import ZPAR_LABEL_ENDPOINTS, ZPAR_LABEL_HOSTNAME, ZPAR_LABEL_PARAMS
from zpar.wire.curve import keys_of

from .communicator import Communicator
from .links import PeerLinks

log = logging.getLogger(__name__)


def ip_toward(url: str) -> str:
    """The local address this host uses to reach ``url`` (the controller): peers on other
    hosts reach us the same way."""
    host = urlparse(url).hostname or "127.0.0.1"
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))  # no packet is sent: this only picks the route
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def host_labels(hosts: Any, hostnames: list[str]) -> list[str]:
    """What counts as a host for the collectives: hostnames (default), one per engine
    (``"engine"``), or an explicit label per rank."""
    if hosts is None:
        return hostnames
    if hosts == "engine":
        return [f"engine-{r}" for r in range(len(hostnames))]
    if isinstance(hosts, (list, tuple)) and len(hosts) == len(hostnames):
        return [str(h) for h in hosts]
    raise ValueError(
        f'hosts must be None (by hostname), "engine" or a list of {len(hostnames)} labels, '
        f"got {hosts!r}"
    )


def _all(mask_payloads: tuple[int, list[bytes | None]], what: str) -> list[bytes]:
    _, payloads = mask_payloads
    missing = [r for r, p in enumerate(payloads) if p is None]
    if missing:
        raise RuntimeError(f"communicator bootstrap: rank(s) {missing} sent no {what}")
    return [p for p in payloads if p is not None]


def join(
    comm_id: str,
    rank: int,
    size: int,
    *,
    name: str = "comm",
    auth: str = "key",
    hosts: Any = None,
    timeout: float = 60.0,
    params: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Run on an engine by ``dv.communicator()``: returns what the client reports."""
    from zpar.engine.engine import this_engine
    from zpar.namespace import current

    from .member import RendezvousMember

    engine = this_engine()
    if engine is None:
        raise RuntimeError("zpar.comm.bootstrap.join runs on a zpar engine only")
    # communicators dropped without Free() and caught in reference cycles close now, not
    # in the middle of this rendezvous
    gc.collect()
    params = dict(params or {})
    member = RendezvousMember.from_engine(comm_id, rank, size, auth=auth, timeout=timeout)
    curve = keys_of(engine.info) is not None  # a --curve cluster: the links are Curve too
    links = PeerLinks(
        rank, size, comm_id, engine.session.key, curve=curve, refused=engine.connections_refused
    )
    try:
        endpoints = links.bind(ip_toward(engine.info.registration))
        hostnames = [
            p.decode()
            for p in _all(
                member.coll(ZPAR_LABEL_HOSTNAME, endpoints["hostname"].encode()), "hostname"
            )
        ]
        table = [
            msgpack.unpackb(p)
            for p in _all(member.coll(ZPAR_LABEL_ENDPOINTS, msgpack.packb(endpoints)), "endpoints")
        ]
        theirs = [
            msgpack.unpackb(p)
            for p in _all(member.coll(ZPAR_LABEL_PARAMS, msgpack.packb(params)), "parameters")
        ]
        differ = [r for r, p in enumerate(theirs) if p != params]
        if differ:
            raise ValueError(
                f"communicator {comm_id!r}: rank(s) {differ} bring other parameters than "
                f"rank {rank} ({theirs[differ[0]]} vs {params}); all must agree"
            )
        member.done()
        links.dance(table, timeout)
        comm = Communicator(links, host_labels(hosts, hostnames), member=member, **params)
    except BaseException:
        links.close()
        member.close()
        raise
    ns = current()
    old = ns.get(name)
    if isinstance(old, Communicator):
        old.abandon()
    ns[name] = comm
    log.info("engine %s: communicator %s rank %d of %d open", engine.id, comm_id, rank, size)
    return {
        "rank": rank,
        "engine_id": engine.id,
        "hostname": endpoints["hostname"],
        "endpoints": endpoints,
    }
