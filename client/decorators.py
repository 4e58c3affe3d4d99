"""``@view.remote`` and ``@view.parallel``: functions that run on the engines when called.

As in ipyparallel: a remote function is ``view.apply(f, *args)``; a parallel function
called with sequences splits them into one block per engine (a DirectView) or per task (a
LoadBalancedView), calls ``f`` on each block and joins the results, and its ``map`` calls
``f`` on each element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class RemoteFunction:
    def __init__(self, view: Any, f: Callable[..., Any], block: bool | None = None) -> None:
        if not callable(f):
            raise TypeError(f"remote() decorates a callable, not {type(f).__name__}")
        self.view = view
        self.func = f
        self.block = block
        functools.update_wrapper(self, f)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        block = self.view.block if self.block is None else self.block
        ar = self.view.apply_async(self.func, *args, **kwargs)
        return ar.get() if block else ar


class ParallelFunction(RemoteFunction):
    def __init__(
        self,
        view: Any,
        f: Callable[..., Any],
        dist: str = "b",
        block: bool | None = None,
        chunksize: int | None = None,
    ) -> None:
        if dist != "b":
            raise ValueError(f"only block distribution (dist='b') is supported, not {dist!r}")
        super().__init__(view, f, block)
        self.chunksize = chunksize

    def __call__(self, *sequences: Any) -> Any:
        """f(block) on each engine's block of the sequences; results joined in order."""
        from .asyncresult import AsyncResult
        from .view import _concat, _lengths, partition

        n = _lengths(sequences)
        ids = self.view._ids() if hasattr(self.view, "_ids") else None
        if ids is not None and not self.chunksize:  # DirectView: block i on engine i
            calls = [
                self.view.client[eid].apply_async(self.func, *(s[sl] for s in sequences))
                for sl, eid in zip(partition(n, len(ids)), ids, strict=True)
                if sl.stop > sl.start
            ]
        else:
            size = self.chunksize or max(1, -(-n // max(1, len(self.view.client.ids))))
            calls = [
                self.view.apply_async(self.func, *(s[i : i + size] for s in sequences))
                for i in range(0, n, size)
            ]
        if not calls:
            return []
        ar = AsyncResult.join(calls)
        ar._postprocess = _concat
        block = self.view.block if self.block is None else self.block
        return ar.get() if block else ar

    def map(self, *sequences: Any) -> Any:
        """f on each element (view.map)."""
        block = self.view.block if self.block is None else self.block
        ar = self.view.map_async(self.func, *sequences)
        return ar.get() if block else ar
