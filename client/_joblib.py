"""ipyparallel's ``ipyparallel.client._joblib`` path: its joblib backend class, by its name."""

from .joblib_backend import ZparBackend as IPythonParallelBackend

__all__ = ["IPythonParallelBackend"]
