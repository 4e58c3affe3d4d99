"""ipyparallel's ``ipyparallel.controller`` path: only ``dependency`` is client API."""

from . import dependency as dependency
