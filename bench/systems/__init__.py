"""One adapter per system: the same calls, implemented with each system's public API."""

from __future__ import annotations

from typing import Any


def get_system(name: str) -> Any:
    if name == "zpar":
        from .zpar_sys import ZparSystem

        return ZparSystem()
    if name == "ipyparallel":
        from .ipp_sys import IppSystem

        return IppSystem()
    if name == "dask":
        from .dask_sys import DaskSystem

        return DaskSystem()
    if name == "ray":
        from .ray_sys import RaySystem

        return RaySystem()
    raise ValueError(f"unknown system {name!r}")
