"""joblib backend: ``with joblib.parallel_backend('zpar'): Parallel(...)(...)`` runs on engines.

Imported only when registered, so joblib stays an optional dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase
from joblib.parallel import register_parallel_backend

from .executor import as_future


class ZparBackend(AutoBatchingMixin, ParallelBackendBase):
    """Batches of joblib calls as load-balanced tasks (joblib sizes the batches)."""

    supports_retrieve_callback = True
    supports_timeout = True
    default_n_jobs = -1

    def __init__(
        self, view: Any = None, connect: Callable[[], tuple[Any, Any]] | None = None, **kwargs: Any
    ) -> None:
        """``view``, or when None ``connect()``: (a view, the client it opened for this
        backend, closed on terminate, or None)."""
        super().__init__(**kwargs)
        self._client = None
        if view is None:
            if connect is None:
                raise ValueError("the zpar joblib backend needs a view or a way to connect")
            view, self._client = connect()
        self._view = view

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        return max(1, len(self._view.client.ids))

    def configure(self, n_jobs: int = 1, parallel: Any = None, **backend_args: Any) -> int:
        self.parallel = parallel
        return self.effective_n_jobs(n_jobs)

    def submit(self, func: Any, callback: Any = None) -> Any:
        fut = as_future(self._view.apply_async(func))
        if callback is not None:
            fut.add_done_callback(callback)
        return fut

    def retrieve_result_callback(self, out: Any) -> Any:
        return out.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        try:
            self._view.abort()
        except Exception:  # nothing queued, or the client is gone
            pass

    def terminate(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def register_joblib_backend(
    name: str = "zpar",
    make_default: bool = False,
    view: Any = None,
    connect: Callable[[], tuple[Any, Any]] | None = None,
) -> None:
    """Make ``joblib.parallel_backend(name)`` run on a zpar cluster: ``view``, or the view
    ``connect()`` gives when the backend is used (zpar.register_joblib_backend's: of the
    newest open Client of this process, inside ``with zpar.Cluster() as rc:`` that
    cluster's, else of a new ``Client()``).
    ipyparallel code names the backend 'ipyparallel': both names are registered then."""
    names = {name, "zpar"} if name == "ipyparallel" else {name}
    for n in sorted(names):
        register_parallel_backend(
            n,
            lambda **kw: ZparBackend(view=view, connect=connect, **kw),
            make_default and n == name,
        )
