"""Engine launchers, one per file: local processes, mpiexec, ssh, Slurm and PBS jobs.

Each module defines an ``EngineSet`` subclass (zpar.cluster.launchers.base) registered under its
kind; ``engine_set_class(kind)`` finds it. `zpar cluster start --engines KIND` and
``zpar.Cluster(engines=KIND)`` use them through zpar.cluster.launcher.LocalCluster.
"""

from __future__ import annotations

import importlib

from zpar.cluster.launchers.base import EngineSet, LaunchContext
from zpar.errors import LaunchError

KINDS = ("local", "mpi", "ssh", "slurm", "pbs")


def engine_set_class(kind: str) -> type[EngineSet]:
    if kind not in KINDS:
        raise LaunchError(f"unknown engine launcher {kind!r}; use one of {', '.join(KINDS)}")
    module = importlib.import_module(f"zpar.cluster.launchers.{kind}")
    return module.ENGINE_SET


__all__ = ["KINDS", "EngineSet", "LaunchContext", "LaunchError", "engine_set_class"]
