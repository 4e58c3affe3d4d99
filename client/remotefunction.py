"""``@remote`` / ``@parallel`` (and the view methods of the same names): functions that run
on the engines when called, as ipyparallel's remotefunction module.

A remote function is ``view.apply(f, *args)``. A parallel function called with sequences
cuts them into one part per engine (a DirectView) or per task (a LoadBalancedView), calls
``f`` on each part and joins the results; its ``map`` calls ``f`` on each element, as the
builtin map.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .partition import _lengths, as_sequences, check_dist, join_parts, split_parts

__all__ = ["ParallelFunction", "RemoteFunction", "parallel", "remote"]


def remote(view: Any, block: bool | None = None, **flags: Any) -> Callable[..., RemoteFunction]:
    """Decorator: ``@remote(view, block=True)`` makes calling the function run it there."""

    def remote_function(f: Callable[..., Any]) -> RemoteFunction:
        return RemoteFunction(view, f, block=block, **flags)

    return remote_function


def parallel(
    view: Any, dist: str = "b", block: bool | None = None, ordered: bool = True, **flags: Any
) -> Callable[..., ParallelFunction]:
    """Decorator: ``@parallel(view)`` makes the function run on parts of its sequences."""

    def parallel_function(f: Callable[..., Any]) -> ParallelFunction:
        return ParallelFunction(view, f, dist=dist, block=block, ordered=ordered, **flags)

    return parallel_function


def getname(f: Any) -> str:
    """f.__name__, else f.name, else str(f)."""
    return getattr(f, "__name__", None) or getattr(f, "name", None) or str(f)


class RemoteFunction:
    """``f`` run through ``view.apply``; ``flags`` are the view's, set for each call."""

    def __init__(
        self, view: Any, f: Callable[..., Any], block: bool | None = None, **flags: Any
    ) -> None:
        if not callable(f):
            raise TypeError(f"remote() decorates a callable, not {type(f).__name__}")
        self.view = view
        self.func = f
        self.block = block
        self.flags = flags
        self.__name__ = getname(f)
        if getattr(f, "__doc__", None):
            self.__doc__ = f"{type(self).__name__} wrapping:\n{f.__doc__}"
        try:
            self.__signature__ = inspect.signature(f)
        except (TypeError, ValueError):  # no signature: fine
            pass

    def _block(self) -> bool:
        return self.view.block if self.block is None else self.block

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.view.temp_flags(**self.flags):
            ar = self.view.apply_async(self.func, *args, **kwargs)
        return ar.get() if self._block() else ar


class ParallelFunction(RemoteFunction):
    """``f`` called on parts of its sequences in parallel (dist 'b': blocks, 'r': round
    robin), results joined in order; ``map`` calls it on each element."""

    def __init__(
        self,
        view: Any,
        f: Callable[..., Any],
        dist: str = "b",
        block: bool | None = None,
        chunksize: int | None = None,
        ordered: bool = True,
        return_exceptions: bool = False,
        **flags: Any,
    ) -> None:
        check_dist(dist)
        super().__init__(view, f, block, **flags)
        self.dist = dist
        self.chunksize = chunksize
        self.ordered = ordered
        self.return_exceptions = return_exceptions

    def __call__(self, *sequences: Any) -> Any:
        """f(part) for each part of the sequences (equal lengths); results joined."""
        from .asyncresult import AsyncMapResult

        sequences = tuple(s if hasattr(s, "__len__") else list(s) for s in sequences)
        n = _lengths(sequences)
        if n == 0:
            return []
        balanced = not hasattr(self.view, "_ids")
        if balanced:
            size = self.chunksize or 1
            nparts = -(-n // size)
        else:
            ids = self.view._ids()
            nparts = len(ids)
        parts = [split_parts(s, nparts, self.dist) for s in sequences]
        calls = []
        with self.view.temp_flags(**self.flags):
            for i in range(nparts):
                args = [p[i] for p in parts]
                if not len(args[0]):
                    continue
                if balanced:
                    calls.append(self.view.apply_async(self.func, *args))
                else:
                    calls.append(self.view.client[ids[i]].apply_async(self.func, *args))
        dist = self.dist

        def join(results: list[Any]) -> Any:
            return join_parts(results, dist)

        ar = self.view._result(  # of calls remembered already
            getname(self.func),
            [m for c in calls for m in c.msg_ids],
            [f for c in calls for f in c._futures],
            cls=AsyncMapResult,
            remember=False,
            ordered=self.ordered,
            postprocess=join,
            return_exceptions=self.return_exceptions,
        )
        return ar.get() if self._block() else ar

    def map(self, *sequences: Any) -> Any:
        """f on each element, as the builtin map (generators read, shortest wins)."""
        kw: dict[str, Any] = {"return_exceptions": self.return_exceptions}
        if self.chunksize is not None and not hasattr(self.view, "_ids"):
            kw["chunksize"] = self.chunksize
        if not hasattr(self.view, "_ids"):
            kw["ordered"] = self.ordered
        seqs, _ = as_sequences(sequences)
        with self.view.temp_flags(**self.flags):
            ar = self.view.map_async(self.func, *seqs, **kw)
        return ar.get() if self._block() else ar
