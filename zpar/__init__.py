"""zpar: a ZeroMQ-based parallel computing controller for Python.

The public API is re-exported here, under ipyparallel's names as well (``import zpar as
ipp`` runs ipyparallel 9.2 code: docs/api.md lists every name). The client side is
imported lazily: engines and the hub import zpar without paying for it.
"""

from __future__ import annotations

from typing import Any

from . import checkout
from .dependency import Dependency, depend, dependent, require
from .errors import (
    AlreadyDisplayedError,
    CompositeError,
    ControllerLost,
    DependencyTimeout,
    EngineError,
    ImpossibleDependency,
    InvalidDependency,
    NoEnginesRegistered,
    RemoteError,
    SchedulerLost,
    SerializationError,
    SubmissionRefused,
    TaskAborted,
    TaskCancelled,
    TaskRejectError,
    TaskTimeout,
    TimeoutError,
    UnmetDependency,
    WrongKey,
    ZparError,
)

checkout.install(__file__)  # from a source checkout: zpar.client is client/ (zpar/checkout.py)

#: concurrent.futures' return_when values (not imported from it: every process imports zpar)
ALL_COMPLETED = "ALL_COMPLETED"
FIRST_COMPLETED = "FIRST_COMPLETED"
FIRST_EXCEPTION = "FIRST_EXCEPTION"

__version__ = "0.1.0"
version_info = (0, 1, 0)

#: ipyparallel's base error names (every zpar error derives from ZparError)
IPythonError = ZparError
KernelError = ZparError

#: lazily imported names -> their module
_LAZY = {
    "Client": "zpar.client.client",
    "typed_function": "zpar.typed.registry",  # zpar.typed: the decorator engines' modules use
    "interactive": "zpar.util",
    "Cluster": "zpar.client.cluster",
    "AsyncResult": "zpar.client.asyncresult",
    "AsyncMapResult": "zpar.client.asyncresult",
    "AsyncHubResult": "zpar.client.asyncresult",
    "View": "zpar.client.view",
    "DirectView": "zpar.client.view",
    "LoadBalancedView": "zpar.client.view",
    "BroadcastView": "zpar.client.view",
    "ViewExecutor": "zpar.client.view",
    "remote": "zpar.client.remotefunction",
    "parallel": "zpar.client.remotefunction",
    "RemoteFunction": "zpar.client.remotefunction",
    "ParallelFunction": "zpar.client.remotefunction",
    "Reference": "zpar.serialize",
    "PrePickled": "zpar.serialize",
    "can": "zpar.serialize",
    "uncan": "zpar.serialize",
    "can_map": "zpar.serialize",
    "uncan_map": "zpar.serialize",
    "use_pickle": "zpar.serialize",
    "use_cloudpickle": "zpar.serialize",
    "use_dill": "zpar.serialize",
    "serialize_object": "zpar.serialize",
    "deserialize_object": "zpar.serialize",
    "pack_apply_message": "zpar.serialize",
    "unpack_apply_message": "zpar.serialize",
    "shared_array": "zpar.sharedmem",  # an array same-host engines read without a copy
}

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "AlreadyDisplayedError",
    "CompositeError",
    "ControllerLost",
    "Dependency",
    "DependencyTimeout",
    "EngineError",
    "IPythonError",
    "ImpossibleDependency",
    "InvalidDependency",
    "KernelError",
    "NoEnginesRegistered",
    "RemoteError",
    "SchedulerLost",
    "SerializationError",
    "TaskAborted",
    "SubmissionRefused",
    "TaskCancelled",
    "TaskRejectError",
    "TaskTimeout",
    "TimeoutError",
    "UnmetDependency",
    "WrongKey",
    "ZparError",
    "__version__",
    "bind_kernel",
    "depend",
    "dependent",
    "register_joblib_backend",
    "require",
    "version_info",
    *sorted(_LAZY),
]


#: submodules ipyparallel users reach as attributes after ``import ipyparallel``
#: (``ipp.error.RemoteError``, ``ipp.util.interactive``...), imported on first use
_SUBMODULES = frozenset({"client", "controller", "error", "serialize", "util"})


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        if name in _SUBMODULES:
            try:
                return importlib.import_module(f"zpar.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"zpar.{name}":
                    raise
        raise AttributeError(f"module 'zpar' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def register_joblib_backend(name: str = "ipyparallel", make_default: bool = False) -> None:
    """Make ``joblib.parallel_backend(name)`` run on zpar: on the client of the innermost
    running ``zpar.Cluster`` (or the newest connected Client), else a new ``Client()``.
    The default name is ipyparallel's; "zpar" is registered too."""
    from zpar.client.client import Client, newest_client
    from zpar.client.joblib_backend import register_joblib_backend as register

    def connect() -> tuple[Any, Any]:
        client = newest_client()  # a zpar.Cluster's, or the last Client() made
        opened = None
        if client is None:
            client = opened = Client()
        return client.load_balanced_view(), opened

    register(name=name, make_default=make_default, connect=connect)


def bind_kernel(**kwargs: Any) -> str:
    """Make the engine this runs on a Jupyter kernel too, as ipyparallel's bind_kernel:
    ``%px zpar.bind_kernel()`` then ``jupyter console --existing <file>`` attaches to that
    engine (its namespace, run between its tasks). Returns the kernel connection file;
    ``ip`` (default 127.0.0.1) and ``connection_file`` may be given. Needs IPython and
    ipykernel on the engine (``pip install 'zpar[ipython]'``)."""
    from zpar.engine.boundkernel import bind_kernel as bind

    return bind(**kwargs)
