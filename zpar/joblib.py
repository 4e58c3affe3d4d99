"""ipyparallel's ``ipyparallel.joblib`` path: its backend class and ``register``, by its
names (``from ipyparallel.joblib import IPythonParallelBackend`` runs under zpar). The
backend is client/joblib_backend.py's; ``zpar.register_joblib_backend`` is the usual way in.
"""

from __future__ import annotations

from typing import Any


def register(name: str = "ipyparallel", make_default: bool = False) -> None:
    """Register the default zpar Client as joblib backend ``name``, as ipyparallel's."""
    from zpar import register_joblib_backend

    register_joblib_backend(name=name, make_default=make_default)


def __getattr__(name: str) -> Any:
    if name == "IPythonParallelBackend":
        from zpar.client.joblib_backend import ZparBackend

        return ZparBackend
    raise AttributeError(f"module 'zpar.joblib' has no attribute {name!r}")
