"""ipyparallel's ``ipyparallel.controller`` path: only ``dependency`` is client API."""
