"""zpar.client: the Client, its views and results, and the Cluster launcher front."""

from .asyncresult import AsyncMapResult, AsyncResult
from .client import Client
from .cluster import Cluster
from .view import BroadcastView, DirectView, LoadBalancedView

__all__ = [
    "AsyncMapResult",
    "AsyncResult",
    "BroadcastView",
    "Client",
    "Cluster",
    "DirectView",
    "LoadBalancedView",
]
