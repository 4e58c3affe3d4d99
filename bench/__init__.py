"""zpar's benchmarks, run side by side with ipyparallel and dask in one command.

``python -m bench --quick`` (see bench/README.md).
"""
