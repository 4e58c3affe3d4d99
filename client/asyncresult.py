"""AsyncResult: the handle a non-blocking call returns, over standard futures.

Replies are decoded lazily, in the thread that asks for them, so the I/O thread stays fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from zpar.errors import CompositeError, RemoteError, TaskAborted, TimeoutError
from zpar.messages import Status
from zpar.serialize import deserialize_object
from zpar.wire import Message

_UNSET = object()


def decode_reply(msg: Message) -> Any:
    """The value of an apply/execute reply, or raise the error it carries."""
    c = msg.content
    status = c.get("status")
    if status == Status.OK:
        if msg.buffers:
            return deserialize_object(msg.buffers)
        return c.get("execute_result") if "execute_result" in c else None
    if status == Status.ABORTED:
        raise TaskAborted(c.get("evalue") or f"task {msg.parent_header.get('msg_id')} aborted")
    raise RemoteError.from_content(c)


class AsyncResult:
    """Results of one call on one or several engines (one msg_id per engine or task)."""

    def __init__(
        self,
        client: Any,
        msg_ids: Sequence[str],
        futures: Sequence[concurrent.futures.Future],
        *,
        fname: str = "",
        targets: Any = None,
        single: bool = False,
        submitted: float | None = None,
        postprocess: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self._client = client
        self.msg_ids = list(msg_ids)
        self._futures = list(futures)
        self._fname = fname
        self._targets = targets
        self._single = single
        self._postprocess = postprocess
        self.submitted = submitted if submitted is not None else time.time()
        self._values: list[Any] | None = None
        self._result: Any = _UNSET

    # -- state ----------------------------------------------------------------------------

    def ready(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every reply is in (or timeout); return ready()."""
        concurrent.futures.wait(self._futures, timeout=timeout)
        return self.ready()

    def successful(self) -> bool:
        if not self.ready():
            raise ValueError(f"{self!r} is not finished: call wait() first")
        try:
            self._collect()
        except Exception:
            return False
        return True

    @property
    def progress(self) -> int:
        return sum(f.done() for f in self._futures)

    def __len__(self) -> int:
        return len(self.msg_ids)

    # -- values ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> Any:
        """Block until done and return the result; raise the remote error if any."""
        if self._result is not _UNSET:
            return self._result
        if not self.wait(timeout):
            raise TimeoutError(
                f"{self.progress}/{len(self)} replies of {self._fname or 'the call'} arrived "
                f"within {timeout} s"
            )
        values = self._collect()
        if self._postprocess is not None:
            values = self._postprocess(values)
        self._result = values[0] if self._single else values
        return self._result

    def get_dict(self, timeout: float | None = None) -> dict[int, Any]:
        values = self.get(timeout)
        values = [values] if self._single else values
        return dict(
            zip(self.engine_id if not self._single else [self.engine_id], values, strict=False)
        )

    def _messages(self) -> list[Message]:
        out = []
        for f in self._futures:
            exc = f.exception()
            if exc is not None:
                raise exc
            out.append(f.result())
        return out

    def _collect(self) -> list[Any]:
        if self._values is not None:
            return self._values
        values: list[Any] = []
        errors: list[BaseException] = []
        for f in self._futures:
            try:
                exc = f.exception()
                if exc is not None:
                    raise exc
                values.append(decode_reply(f.result()))
            except Exception as e:
                errors.append(e)
                values.append(e)
        if errors:
            if len(errors) == 1 or self._single:
                raise errors[0]
            raise CompositeError(f"{len(errors)} of {len(self)} calls raised", errors)
        self._values = values
        return values

    # -- metadata -------------------------------------------------------------------------

    def _meta(self, key: str) -> Any:
        self.wait()
        out = []
        for f in self._futures:
            if f.exception() is not None:
                out.append(None)
                continue
            md = f.result().metadata
            out.append(md.get(key))
        return out[0] if self._single else out

    @property
    def metadata(self) -> Any:
        self.wait()
        mds = [
            {} if f.exception() is not None else dict(f.result().metadata, submitted=self.submitted)
            for f in self._futures
        ]
        return mds[0] if self._single else mds

    @property
    def engine_id(self) -> Any:
        return self._meta("engine_id")

    @property
    def stdout(self) -> Any:
        return self._meta("stdout")

    @property
    def stderr(self) -> Any:
        return self._meta("stderr")

    @property
    def started(self) -> Any:
        return self._meta("started")

    @property
    def completed(self) -> Any:
        return self._meta("completed")

    @property
    def elapsed(self) -> float:
        return time.time() - self.submitted

    def __getitem__(self, key: str) -> Any:
        if isinstance(key, str):
            return self._meta(key)
        raise TypeError("index an AsyncResult by metadata key, e.g. ar['engine_id']")

    # -- asyncio --------------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, Any]:
        yield from asyncio.gather(
            *(asyncio.wrap_future(f) for f in self._futures), return_exceptions=True
        ).__await__()
        return self.get()

    def __repr__(self) -> str:
        state = "finished" if self.ready() else "pending"
        return f"<{type(self).__name__}({self._fname}): {state} {self.progress}/{len(self)}>"


class AsyncMapResult(AsyncResult):
    """A map's result: chunks of results flattened back in submission order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("postprocess", _flatten)
        super().__init__(*args, **kwargs)

    def __iter__(self):
        return iter(self.get())


def _flatten(chunks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        out.extend(chunk)
    return out
