"""A cluster's life cycle: its settings, connection files and keys, the launchers that start
its processes, and what the `zpar cluster|profile|config|controller|engine` commands do.

``from zpar.cluster import Cluster`` works as ipyparallel's ``ipyparallel.cluster`` path
does: the class is the client's (client/cluster.py), imported when first asked for, so the
processes that import this package for their settings never load the client.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Cluster":
        from zpar.client.cluster import Cluster

        return Cluster
    raise AttributeError(f"module 'zpar.cluster' has no attribute {name!r}")
