"""zpar engines: the process that runs users' functions (``python -m zpar.engine``).

Kept import-light: clients import ``zpar.namespace`` for push/pull.
"""
