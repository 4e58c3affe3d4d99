"""Former home of RemoteFunction / ParallelFunction: see zpar.client.remotefunction."""

from .remotefunction import ParallelFunction, RemoteFunction

__all__ = ["ParallelFunction", "RemoteFunction"]
