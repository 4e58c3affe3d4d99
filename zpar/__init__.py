"""zpar: a ZeroMQ-based parallel computing controller for Python.

The public API is re-exported here: ``zpar.Client``, ``zpar.Cluster`` and the error tree.
"""

from __future__ import annotations

from .dependency import Dependency, depend, require
from .errors import (
    CompositeError,
    ControllerLost,
    EngineError,
    ImpossibleDependency,
    NoEnginesRegistered,
    RemoteError,
    SchedulerLost,
    SerializationError,
    TaskAborted,
    TaskTimeout,
    TimeoutError,
    UnmetDependency,
    WrongKey,
    ZparError,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Cluster",
    "CompositeError",
    "ControllerLost",
    "Dependency",
    "EngineError",
    "ImpossibleDependency",
    "NoEnginesRegistered",
    "RemoteError",
    "SchedulerLost",
    "SerializationError",
    "TaskAborted",
    "TaskTimeout",
    "TimeoutError",
    "UnmetDependency",
    "WrongKey",
    "ZparError",
    "__version__",
    "depend",
    "require",
]


def __getattr__(name: str):
    # Lazy: engines and the hub import zpar without paying for the client.
    if name == "Client":
        from zpar.client.client import Client

        return Client
    if name == "Cluster":
        from zpar.client.cluster import Cluster

        return Cluster
    raise AttributeError(f"module 'zpar' has no attribute {name!r}")
