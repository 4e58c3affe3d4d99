"""The result handles ipyparallel users import from ``ipyparallel.client.asyncresult``:
AsyncResult (client.callresult), AsyncMapResult (a map's, flattening its chunks or
elements back into one sequence) and AsyncHubResult (tasks fetched from the hub).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION
from typing import Any

from zpar.elements import PART_SEP
from zpar.errors import CompositeError, NotReadyError

from .callresult import AsyncResult
from .elementorder import as_answered, first_error, in_order
from .futurewait import wait_all
from .mapparts import ElementFuture, MapWaiters, Parts
from .replyvalue import decode_reply, has_exception, not_ready, raise_errors
from .request import submitted_of
from .resultmeta import Metadata, element_metadata

__all__ = ["AsyncHubResult", "AsyncMapResult", "AsyncResult", "decode_reply"]


class AsyncMapResult(AsyncResult):
    """A map's result: chunks of results flattened back in submission order. Its length
    and progress count elements, as in ipyparallel.

    A load-balanced map without chunksize is one task per element, as ipyparallel's
    chunksize=1 (``parts``: its element requests, zpar.elements): ``msg_ids``,
    ``progress``, metadata, iteration, errors and ``abort`` are per element, whatever the
    number of messages underneath."""

    __slots__ = ("ordered", "_chunk_sizes", "_parts", "_ids", "_element_ids", "_map_waiters")

    _chunked = True

    def __init__(
        self,
        *args: Any,
        ordered: bool = True,
        chunk_sizes: Sequence[int] | None = None,
        parts: Sequence[Parts] | None = None,
        waiters: MapWaiters | None = None,
        **kwargs: Any,
    ) -> None:
        self._parts = list(parts) if parts is not None else None
        self._map_waiters = waiters
        self._element_ids: list[str] | None = None
        kwargs.setdefault("postprocess", _flatten)
        super().__init__(*args, **kwargs)
        self.ordered = ordered
        self._chunk_sizes = list(chunk_sizes) if chunk_sizes is not None else None

    # msg_ids: one per element for a map of elements (ipyparallel's chunksize=1), made
    # when first read; the requests' own ids are ``request_ids``
    @property
    def msg_ids(self) -> list[str]:
        if self._parts is None:
            return self._ids
        ids = self._element_ids
        if ids is None:
            ids = self._element_ids = [
                f"{m}{PART_SEP}{j}"
                for m, p in zip(self._ids, self._parts, strict=True)
                for j in range(p.n)
            ]
        return ids

    @msg_ids.setter
    def msg_ids(self, value: list[str]) -> None:
        self._ids = value
        self._element_ids = None

    @property
    def request_ids(self) -> list[str]:
        """The msg_ids of the requests sent (an element request's answers its elements)."""
        return self._ids

    def __len__(self) -> int:
        if self._chunk_sizes is None:
            return len(self.msg_ids)
        return sum(self._chunk_sizes)

    @property
    def progress(self) -> int:
        if self._parts is not None:
            return sum(p.answered for p in self._parts)
        if self._chunk_sizes is None:
            return super().progress
        return sum(n for n, f in zip(self._chunk_sizes, self._futures, strict=True) if f.done())

    def __iter__(self) -> Iterator[Any]:
        """Elements in order (ordered=True) or chunk by chunk as they complete."""
        if self._parts is not None:
            yield from self._iter_elements()
            return
        chunks = (
            self.as_completed()
            if not self.ordered
            else map(self._value_at, range(len(self._futures)))
        )
        for chunk in chunks:
            if isinstance(chunk, Exception):  # with return_exceptions: in the element's place
                yield chunk
            else:
                yield from chunk

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            return self._meta(key)
        return self.get()[key]

    # -- a map of elements ------------------------------------------------------------------

    def _element(self, parts: Parts, pos: int) -> Any:
        """An answered element's value; its error raised as ipyparallel's iteration does
        (a CompositeError of that one element) unless errors are returned."""
        v = parts.value(pos)
        if isinstance(v, Exception) and not self._return_exceptions:
            raise CompositeError(
                f"one or more exceptions raised in: {self._fname or 'unspecified'}", [v]
            )
        return v

    def _iter_elements(self) -> Iterator[Any]:
        parts = self._parts
        assert parts is not None
        order = (
            in_order(parts) if self.ordered else as_answered(parts, self._map_waiters, len(self))
        )
        for p, j in order:
            yield self._element(p, j)

    def _element_values(self) -> list[Any]:
        assert self._parts is not None
        if len(self._parts) == 1:
            return self._parts[0].values()
        out: list[Any] = []
        for p in self._parts:
            out.extend(p.values())
        return out

    def _get(self, timeout: float | None, return_exceptions: bool, return_when: str | None) -> Any:
        if self._parts is None:
            return super()._get(timeout, return_exceptions, return_when)
        if return_when == FIRST_EXCEPTION:
            error = first_error(
                self._parts, self._map_waiters, timeout, self.ready, lambda: self.progress
            )
            if error is not None and not return_exceptions:
                raise error
        if not wait_all(self._futures, timeout):
            raise not_ready(self.progress, len(self), self._fname, timeout)
        values = self._element_values()
        if return_exceptions:
            return values
        raise_errors(values, one_call=False, fname=self._fname, what="elements")
        self._result = values
        return values

    def successful(self) -> bool:
        if self._parts is None:
            return super().successful()
        if not self.ready():
            raise NotReadyError(f"{self!r} is not finished: cannot check successful()")
        return not has_exception(self._element_values())

    def _metadatas(self) -> list[Metadata]:
        if self._parts is None:
            return super()._metadatas()
        out = []
        ids = iter(self.msg_ids)
        for p, f in zip(self._parts, self._futures, strict=True):
            submitted = submitted_of(f) or self._submitted
            label = getattr(f, "label", None)  # the request's, each element's
            for j in range(p.n):
                reply = p.reply_of(j)
                value = p.value(j) if reply is not None else None
                out.append(element_metadata(next(ids), submitted, reply, value, p.error, label))
        return out

    def split(self) -> tuple[AsyncResult, ...]:
        """One AsyncResult per element (a map of elements), as ipyparallel's chunksize=1
        map (each a part whose value is ``[[value]]``: a list of its one chunk); one per
        chunk otherwise."""
        if self._parts is None:
            return super().split()
        out = []
        ids = iter(self.msg_ids)
        for p in self._parts:
            for j in range(p.n):
                fut = ElementFuture(p, j, self._map_waiters)
                out.append(
                    AsyncResult(
                        self._client,
                        [next(ids)],
                        [fut],
                        fname=self._fname,
                        single=False,  # as a chunk's part: [[value]], ipyparallel's shape
                        submitted=self._submitted,
                        return_exceptions=self._return_exceptions,
                    )
                )
        return tuple(out)

    def as_completed(self, timeout: float | None = None) -> Iterator[Any]:
        if self._parts is None:
            yield from super().as_completed(timeout)
            return
        yield from self._iter_elements()


class AsyncHubResult(AsyncResult):
    """Results of tasks fetched from the hub's task store (``get_result`` of tasks another
    client submitted): the hub is polled while they are pending."""

    __slots__ = ()


def _flatten(chunks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        if isinstance(chunk, Exception):
            out.append(chunk)
        else:
            out.extend(chunk)
    return out
