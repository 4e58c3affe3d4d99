"""The communicator an engine gets: mpi4py's method names over zpar's peer links.

Lowercase methods move Python objects (pickled), uppercase ones move numpy buffers (raw
bytes straight from and into the arrays, no pickle). Signatures follow mpi4py's
``MPI.Comm`` (``send(obj, dest, tag=0)``, ``Recv(buf, source=ANY_SOURCE, tag=ANY_TAG,
status=None)``, ``Allreduce(sendbuf, recvbuf, op=SUM)`` …); ``IN_PLACE`` works where MPI
allows it.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from zpar.constants import (
    COLL_MAXLINEAR,
    COLL_XSIZE,
    PK_ACKMARK,
    PK_HIWATER,
    PK_MAXDATALEN,
)

from . import ops as _ops
from .collectives import Collectives
from .fastcoll import allreduce_small
from .lane import NOT_TAKEN, RAW
from .links import PeerLinks
from .ops import SUM, Op, as_op
from .p2p import (
    ANY_SOURCE,
    ANY_TAG,
    FAST_WAIT_NS,
    P2P,
    PROC_NULL,
    CommError,
    Request,
    Status,
    as_bytes_view,
)
from .peerwire import CTX_P2P, ENC_PICKLE, ENC_RAW
from .topology import Topology

log = logging.getLogger(__name__)


#: packets per chunk of a pipelined (long) collective
PIPELINE_PACKETS = 4


class _InPlace:
    def __repr__(self) -> str:
        return "IN_PLACE"


#: use the receive buffer as the send buffer (MPI_IN_PLACE)
IN_PLACE = _InPlace()


def _array(buf: Any) -> np.ndarray:
    """The numpy array of a buffer spec (an array, or mpi4py's ``[array, ...]`` forms)."""
    if isinstance(buf, (list, tuple)):
        buf = buf[0]
    if not isinstance(buf, np.ndarray):
        buf = np.frombuffer(buf, dtype=np.uint8)
    if not buf.flags.c_contiguous:
        raise ValueError("buffers must be C-contiguous numpy arrays (use np.ascontiguousarray)")
    return buf


def _vspec(buf: Any, size: int, what: str) -> tuple[np.ndarray, list[int], list[int]]:
    """mpi4py's vector buffer forms: [array, counts], [array, (counts, displs)],
    [array, counts, displs] (counts and displacements in elements)."""
    if not isinstance(buf, (list, tuple)) or len(buf) < 2:
        raise TypeError(f"{what}: expected [array, counts] or [array, (counts, displs)]")
    arr = _array(buf[0])
    counts = buf[1]
    displs = buf[2] if len(buf) > 2 and not isinstance(buf[2], np.dtype | str | type) else None
    if isinstance(counts, tuple) and len(counts) == 2 and displs is None:
        counts, displs = counts
    counts = [int(c) for c in counts]
    if len(counts) != size:
        raise ValueError(f"{what}: {len(counts)} counts for {size} ranks")
    if displs is None:
        displs = list(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int))
    displs = [int(d) for d in displs]
    return arr, counts, displs


class _RootError(ValueError):
    """A root rank out of range (every rank passes the same root)."""


def _collective(method: Callable[..., Any]) -> Callable[..., Any]:
    """A collective that fails on one rank breaks the communicator: the others get
    CommError instead of waiting for this rank forever (MPI's default error handler). A root
    out of range is the same mistake on every rank, so it leaves the communicator usable."""

    @functools.wraps(method)
    def run(self: Communicator, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (CommError, _RootError):
            raise
        except BaseException as e:  # an interrupt (engine abort) too: the others must know
            if self._p2p.broken is None:
                self._p2p._break(f"rank {self.rank} failed in {method.__name__}: {e!r}", [])
            raise

    return run


class Communicator:
    """One rank's end of a communicator: built by ``zpar.comm.bootstrap.join`` on each
    engine, or from any process's opened ``PeerLinks`` (bind, exchange endpoints, dance)."""

    ANY_SOURCE = ANY_SOURCE
    ANY_TAG = ANY_TAG
    PROC_NULL = PROC_NULL
    IN_PLACE = IN_PLACE
    Status = Status
    Request = Request
    Op = Op

    def __init__(
        self,
        links: PeerLinks,
        hosts: Sequence[str],
        *,
        coll_xsize: int = COLL_XSIZE,
        coll_maxlinear: int = COLL_MAXLINEAR,
        ackmark: int = PK_ACKMARK,
        hiwater: int = PK_HIWATER,
        maxdatalen: int = PK_MAXDATALEN,
        timeout: float | None = None,
        member: Any = None,
        shm: int = 1,
    ) -> None:
        if coll_xsize < 0 or coll_maxlinear < 0:
            raise ValueError("coll_xsize and coll_maxlinear must be >= 0")
        self._links = links
        self.rank, self.size = links.rank, links.size
        self.name = links.comm_id
        self._p2p = P2P(
            links,
            maxdatalen=maxdatalen,
            ackmark=ackmark,
            hiwater=hiwater,
            timeout=timeout,
            shm=bool(shm),
        )
        #: the same-host lane (zpar.comm.lane): small messages between ranks of this host
        #: in one compiled call each way
        self._lane = links.lane
        self.topology = Topology(self.rank, hosts)
        self._coll = Collectives(
            self._p2p,
            self.topology,
            coll_xsize=coll_xsize,
            coll_maxlinear=coll_maxlinear,
            # a pipeline chunk of several packets is a long message: past its first packet
            # it moves through shared memory on one host, and costs one SYNCACK per chunk
            chunk=maxdatalen * PIPELINE_PACKETS,
        )
        self.params = {
            "coll_xsize": coll_xsize,
            "coll_maxlinear": coll_maxlinear,
            "ackmark": ackmark,
            "hiwater": hiwater,
            "maxdatalen": maxdatalen,
            "shm": int(bool(shm)),
        }
        self._member = member
        if member is not None:
            self._p2p.liveness = member.lost
        for name, op in _ops.PREDEFINED.items():
            setattr(self, name, op)

    # -- facts ------------------------------------------------------------------------------

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    @property
    def last_algorithm(self) -> str:
        """The algorithm of the last collective: linear, binomial, recursive_doubling, ring
        or pairwise."""
        return self._coll.last_algorithm

    @property
    def last_protocol(self) -> str:
        """short or long (the coll_xsize switch) for the last collective."""
        return self._coll.last_protocol

    @property
    def last_two_phase(self) -> bool:
        """Whether the last collective went host masters first, then local ranks."""
        return self._coll.last_two_phase

    @property
    def timeout(self) -> float | None:
        return self._p2p.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._p2p.timeout = value

    def flow_state(self, peer: int) -> dict[str, int]:
        """Credit window toward ``peer`` (inflight, hiwater, stalls, queued)."""
        return self._p2p.flow_state(peer)

    def __repr__(self) -> str:
        return f"<zpar Communicator {self.name!r} rank {self.rank} of {self.size}>"

    # -- point to point, objects ------------------------------------------------------------

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        lane = self._lane
        # pickled (protocol 5) and put in one call: P2P.send_now, inline
        r = lane.send_object(dest, obj, tag, CTX_P2P)
        if r:  # a small message to a rank of this host: in its mailbox already
            if r == 2:
                self._links.wake(dest)
            return
        data = lane.last_pickle
        if data is None:
            data = pickle.dumps(obj, 5)
        else:
            lane.last_pickle = None
        Request(self._p2p, self._p2p.post_send(dest, data, tag, CTX_P2P, ENC_PICKLE), "send").Wait()

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        data = pickle.dumps(obj, protocol=5)
        return Request(
            self._p2p, self._p2p.post_send(dest, data, tag, CTX_P2P, ENC_PICKLE), "isend"
        )

    def recv(
        self,
        buf: Any = None,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        p2p, lane = self._p2p, self._lane
        # P2P.recv_now, inline (a Python call less per message), unpickled by the lane
        if (
            p2p._posted
            or p2p._unexpected
            or self._links.early
            or p2p._busy
            or p2p._await_sync
            or p2p._filling
        ):
            return self.irecv(None, source, tag).wait(status)
        obj = lane.recv_object(source, tag, CTX_P2P, FAST_WAIT_NS)
        if obj is NOT_TAKEN:
            return self.irecv(None, source, tag).wait(status)
        if status is not None:
            status._set(source, lane.last_tag, lane.last_n)
        if obj is RAW:
            raise CommError(
                f"recv() got a raw buffer message ({lane.last_n} bytes from rank {source}, "
                "sent with Send?): receive it with Recv into an array"
            )
        return obj

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        return Request(self._p2p, self._p2p.post_recv(source, tag, CTX_P2P), "irecv")

    def sendrecv(
        self,
        sendobj: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> Any:
        r = self.irecv(None, source, recvtag)
        s = self.isend(sendobj, dest, sendtag)
        Request.Waitall([r, s])
        return r.wait(status)

    def probe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        """Wait until a message for (source, tag) has arrived; ``status`` tells its source,
        tag and size, so a buffer of the right size can be posted (mpi4py's ``probe``)."""
        return self._probed(self._p2p.probe(source, tag, True), status)

    def iprobe(
        self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None
    ) -> bool:
        """Whether a message for (source, tag) has arrived, without waiting."""
        return self._probed(self._p2p.probe(source, tag, False), status)

    Probe = probe
    Iprobe = iprobe

    @staticmethod
    def _probed(found: tuple[int, int, int] | None, status: Status | None) -> bool:
        if found is not None and status is not None:
            status._set(*found)
        return found is not None

    # -- point to point, buffers ------------------------------------------------------------

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:  # noqa: N802
        r = self._lane.send_eager(dest, buf, tag, CTX_P2P, ENC_RAW)  # P2P.send_now, inline
        if r:  # a small message to a rank of this host: in its mailbox already
            if r == 2:
                self._links.wake(dest)
            return
        self.Isend(buf, dest, tag).Wait()

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:  # noqa: N802
        view = as_bytes_view(buf)
        op = self._p2p.post_send(dest, view, tag, CTX_P2P, ENC_RAW, track=True)
        return Request(self._p2p, op, "Isend")

    def Recv(  # noqa: N802
        self,
        buf: Any,
        source: int = ANY_SOURCE,
        tag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        p2p = self._p2p
        # P2P.recv_now, inline (a Python call less per message)
        if (
            p2p._posted
            or p2p._unexpected
            or self._links.early
            or p2p._busy
            or p2p._await_sync
            or p2p._filling
        ):
            n = -3
        else:
            n = self._lane.recv_eager(source, tag, CTX_P2P, buf, FAST_WAIT_NS)
        if n < 0:
            self.Irecv(buf, source, tag).Wait(status)
        elif status is not None:
            status._set(source, self._lane.last_tag, n)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:  # noqa: N802
        return Request(self._p2p, self._p2p.post_recv(source, tag, CTX_P2P, buf), "Irecv")

    def Sendrecv(  # noqa: N802
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        if recvbuf is None:
            raise TypeError("Sendrecv needs a recvbuf")
        r = self.Irecv(recvbuf, source, recvtag)
        s = self.Isend(sendbuf, dest, sendtag)
        Request.Waitall([r, s])
        r.Wait(status)

    # -- collectives, objects ---------------------------------------------------------------

    @_collective
    def barrier(self) -> None:
        self._coll.barrier()

    Barrier = barrier

    @_collective
    def bcast(self, obj: Any, root: int = 0) -> Any:
        self._check_root(root)
        return self._coll.bcast_obj(obj, root)

    @_collective
    def scatter(self, sendobj: Any, root: int = 0) -> Any:
        self._check_root(root)
        return self._coll.scatter_obj(sendobj, root)

    @_collective
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        self._check_root(root)
        return self._coll.gather_obj(sendobj, root)

    @_collective
    def allgather(self, sendobj: Any) -> list[Any]:
        return self._coll.allgather_obj(sendobj)

    @_collective
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        return self._coll.alltoall_obj(sendobj)

    @_collective
    def reduce(self, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
        self._check_root(root)
        return self._coll.reduce_obj(sendobj, as_op(op), root)

    @_collective
    def allreduce(self, sendobj: Any, op: Any = SUM) -> Any:
        return self._coll.allreduce_obj(sendobj, as_op(op))

    @_collective
    def scan(self, sendobj: Any, op: Any = SUM) -> Any:
        return self._coll.scan_obj(sendobj, as_op(op))

    @_collective
    def exscan(self, sendobj: Any, op: Any = SUM) -> Any:
        return self._coll.scan_obj(sendobj, as_op(op), exclusive=True)

    # -- collectives, buffers ---------------------------------------------------------------

    @_collective
    def Bcast(self, buf: Any, root: int = 0) -> None:  # noqa: N802
        self._check_root(root)
        self._coll.bcast_arr(_array(buf), root)

    @_collective
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:  # noqa: N802
        self._check_root(root)
        send = _array(recvbuf) if sendbuf is IN_PLACE else _array(sendbuf)
        out = self._coll.reduce_arr(send, as_op(op), root)
        if self.rank == root:
            _array(recvbuf)[...] = out.reshape(_array(recvbuf).shape)

    @_collective
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:  # noqa: N802
        recv = _array(recvbuf)
        send = recv if sendbuf is IN_PLACE else _array(sendbuf)
        if send.nbytes != recv.nbytes:
            raise ValueError(f"Allreduce: send {send.nbytes} bytes, recv {recv.nbytes} bytes")
        op = as_op(op)
        if send.dtype == recv.dtype and allreduce_small(self._coll, send, recv, op):
            return  # small, one host: through the lane, one call per message
        out = self._coll.allreduce_arr(send.copy() if send is recv else send, op)
        recv[...] = out.reshape(recv.shape)

    @_collective
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802
        self._check_root(root)
        send = _array(sendbuf) if self.rank == root and sendbuf is not None else None
        self._coll.scatter_arr(send, _array(recvbuf), root)

    @_collective
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802
        self._check_root(root)
        recv = _array(recvbuf) if self.rank == root else None
        if sendbuf is IN_PLACE:
            if recv is None:
                raise ValueError("Gather: IN_PLACE only on the root")
            sendbuf = recv.reshape(-1)[self.rank * (recv.size // self.size) :][
                : recv.size // self.size
            ].copy()
        self._coll.gather_arr(_array(sendbuf), recv, root)

    @_collective
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802
        recv = _array(recvbuf)
        if sendbuf is IN_PLACE:
            per = recv.size // self.size
            sendbuf = recv.reshape(-1)[self.rank * per : (self.rank + 1) * per].copy()
        self._coll.allgather_arr(_array(sendbuf), recv)

    @_collective
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802
        recv = _array(recvbuf)
        send = recv.copy() if sendbuf is IN_PLACE else _array(sendbuf)
        if send.nbytes != recv.nbytes or send.nbytes % self.size:
            raise ValueError(
                f"Alltoall: send {send.nbytes} and recv {recv.nbytes} bytes must be equal and "
                f"split in {self.size} blocks"
            )
        per = send.nbytes // self.size
        sv, rv = as_bytes_view(send), as_bytes_view(recv, writable=True)
        self._coll.alltoallv_arr(
            [sv[k * per : (k + 1) * per] for k in range(self.size)],
            [rv[k * per : (k + 1) * per] for k in range(self.size)],
            uniform=True,
        )

    @_collective
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802
        """mpi4py's vector forms: ``[array, counts]``, ``[array, (counts, displs)]`` or
        ``[array, counts, displs]`` on both sides, counts in elements of each array."""
        send, scounts, sdispls = _vspec(sendbuf, self.size, "Alltoallv send")
        recv, rcounts, rdispls = _vspec(recvbuf, self.size, "Alltoallv recv")
        sv, rv = as_bytes_view(send), as_bytes_view(recv, writable=True)
        si, ri = send.itemsize, recv.itemsize
        self._coll.alltoallv_arr(
            [sv[d * si : (d + c) * si] for c, d in zip(scounts, sdispls, strict=True)],
            [rv[d * ri : (d + c) * ri] for c, d in zip(rcounts, rdispls, strict=True)],
        )

    def _blocks(self, buf: Any, what: str) -> tuple[np.ndarray, list[memoryview]]:
        arr, counts, displs = _vspec(buf, self.size, what)
        view, k = as_bytes_view(arr, writable=True), arr.itemsize
        return arr, [view[d * k : (d + c) * k] for c, d in zip(counts, displs, strict=True)]

    @_collective
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802
        """Blocks of any size to the root: recvbuf ``[array, counts(, displs)]`` there."""
        self._check_root(root)
        blocks = self._blocks(recvbuf, "Gatherv recv")[1] if self.rank == root else None
        self._coll.gatherv_bytes(as_bytes_view(_array(sendbuf)), blocks, root)

    @_collective
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:  # noqa: N802
        """Blocks of any size from the root: sendbuf ``[array, counts(, displs)]`` there."""
        self._check_root(root)
        blocks = self._blocks(sendbuf, "Scatterv send")[1] if self.rank == root else None
        self._coll.scatterv_bytes(blocks, as_bytes_view(_array(recvbuf), writable=True), root)

    @_collective
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802
        """Every rank's block, of any size, to every rank (pairwise exchange)."""
        mine = as_bytes_view(_array(sendbuf))
        blocks = self._blocks(recvbuf, "Allgatherv recv")[1]
        self._coll.alltoallv_arr([mine] * self.size, blocks)

    @_collective
    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:  # noqa: N802
        recv = _array(recvbuf)
        send = recv.copy() if sendbuf is IN_PLACE else _array(sendbuf)
        out = self._coll.scan_arr(send, as_op(op))
        assert out is not None
        recv[...] = out.reshape(recv.shape)

    @_collective
    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:  # noqa: N802
        """Exclusive prefix; rank 0's recvbuf is left as it was (undefined in MPI)."""
        recv = _array(recvbuf)
        send = recv.copy() if sendbuf is IN_PLACE else _array(sendbuf)
        out = self._coll.scan_arr(send, as_op(op), exclusive=True)
        if out is not None:
            recv[...] = out.reshape(recv.shape)

    # -- life -------------------------------------------------------------------------------

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self.size:
            raise _RootError(f"root {root} out of range for a communicator of size {self.size}")

    def Free(self) -> None:  # noqa: N802
        """Close this rank's links (collective: every rank calls it); the rendezvous
        member, if any, says FINI."""
        if self._links.closed:
            return
        if self._p2p.broken is None:
            self._coll.barrier()
            self._p2p.finish()
        self._links.close(linger_ms=2000)
        self._p2p.close_rings()
        if self._member is not None:
            self._member.close()

    close = Free

    def __del__(self) -> None:
        # dropped without Free() (``del comm``, rc.clear()): close now, FIN to the peers and
        # FINI to the hub, rather than whenever the sockets happen to be collected
        try:
            self.abandon()
        except Exception:  # noqa: BLE001 - nothing to report to at collection time
            pass

    def abandon(self) -> None:
        """Close this rank's links now, not collectively (a communicator replaced under
        the same name); peers see a FIN, not a loss."""
        if not self._links.closed:
            self._p2p.finish()
            self._links.close(linger_ms=1000)
            self._p2p.close_rings()
        if self._member is not None:
            self._member.close()
