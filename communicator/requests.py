"""What a caller holds while point-to-point operations run: mpi4py's ``Request`` and
``Status``, the wildcard ranks and tags, and the communicator's error."""

from __future__ import annotations

import pickle
from typing import Any, Protocol

import numpy as np

from zpar.errors import ZparError

from .peerwire import ENC_PICKLE


class Progress(Protocol):
    """What a request needs of the point-to-point engine that made it (comm.p2p.P2P):
    typed here so requests.py does not import p2p.py, which imports it."""

    def wait(self, ops: list[Any], what: str = "operation") -> None: ...

    def progress(self, timeout_ms: int = 0) -> int: ...


ANY_SOURCE = -1
ANY_TAG = -1
#: send to / receive from nobody: a no-op, handy at the edges of a halo exchange
PROC_NULL = -2


class CommError(ZparError):
    """The communicator broke: a peer was lost or aborted; ``ranks`` names the peers lost."""

    def __init__(self, message: str, ranks: list[int] | None = None) -> None:
        super().__init__(message)
        self.ranks = ranks or []


class Status:
    """Source, tag and size of a received message (mpi4py's ``MPI.Status``)."""

    def __init__(self) -> None:
        self.source = ANY_SOURCE
        self.tag = ANY_TAG
        self.count = 0  #: bytes
        self.error = 0

    def Get_source(self) -> int:  # noqa: N802 - mpi4py's name
        return self.source

    def Get_tag(self) -> int:  # noqa: N802
        return self.tag

    def Get_count(self, datatype: Any = None) -> int:  # noqa: N802
        """Bytes received, or elements of ``datatype`` (a numpy dtype) when given."""
        if datatype is None:
            return self.count
        return self.count // np.dtype(datatype).itemsize

    Get_elements = Get_count

    def _set(self, source: int, tag: int, count: int) -> None:
        self.source, self.tag, self.count = source, tag, count

    def __repr__(self) -> str:
        return f"<Status source={self.source} tag={self.tag} count={self.count}>"


class Request:
    """A pending isend / irecv (mpi4py's ``MPI.Request``): ``Wait``/``Test`` for buffers,
    ``wait``/``test`` returning the received object."""

    def __init__(self, p2p: Progress, op: Any, what: str) -> None:
        self._p2p, self._op, self._what = p2p, op, what

    def Wait(self, status: Status | None = None) -> bool:  # noqa: N802
        self._p2p.wait([self._op], self._what)
        self._fill_status(status)
        return True

    def Test(self, status: Status | None = None) -> bool:  # noqa: N802
        if not self._op.complete():
            self._p2p.progress(0)
        if self._op.error is not None:
            raise self._op.error
        done = self._op.complete()
        if done:
            self._fill_status(status)
        return done

    def wait(self, status: Status | None = None) -> Any:
        self.Wait(status)
        return self._value()

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        done = self.Test(status)
        return done, (self._value() if done else None)

    def _value(self) -> Any:
        op = self._op
        if getattr(op, "buf", False) is None:
            return None if op.source == PROC_NULL and op.data is None else unpickle(op)
        return None

    def _fill_status(self, status: Status | None) -> None:
        if status is not None and hasattr(self._op, "status"):
            s = self._op.status
            status._set(s.source, s.tag, s.count)

    @staticmethod
    def Waitall(requests: list[Request], statuses: list[Status] | None = None) -> bool:  # noqa: N802
        if requests:
            p2p = requests[0]._p2p
            p2p.wait([r._op for r in requests], "Waitall")
        for i, r in enumerate(requests):
            r._fill_status(statuses[i] if statuses else None)
        return True

    @staticmethod
    def waitall(requests: list[Request], statuses: list[Status] | None = None) -> list[Any]:
        Request.Waitall(requests, statuses)
        return [r._value() for r in requests]

    @staticmethod
    def Testall(requests: list[Request]) -> bool:  # noqa: N802
        return all(r.Test() for r in requests)


def dumps(obj: Any) -> bytes:
    """An object as it travels pickled (protocol 5: its buffers out of band)."""
    return pickle.dumps(obj, protocol=5)


def unpickle(op: Any) -> Any:
    if op.enc != ENC_PICKLE:
        raise CommError(
            f"recv() got a raw buffer message ({op.total} bytes from rank {op.status.source}, "
            "sent with Send?): receive it with Recv into an array"
        )
    return pickle.loads(op.data)
