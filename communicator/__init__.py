"""Engines talking to each other: a communicator bootstrapped by a rendezvous (issue 16).

The rendezvous (``zpar.comm.rendezvous``) is the IMPI server's role, driven by the hub
(``zpar.comm.hub``) or by a stand-alone byte-exact IMPI server
(``zpar.comm.impi_server``); engines join it through ``zpar.comm.member``.
"""

# -- the communicator's public names, imported on first use ---------------------------------

_LAZY = {
    **{
        n: "ops"
        for n in (
            "Op",
            "SUM",
            "PROD",
            "MAX",
            "MIN",
            "LAND",
            "LOR",
            "LXOR",
            "BAND",
            "BOR",
            "BXOR",
            "MAXLOC",
            "MINLOC",
        )
    },
    **{
        n: "requests"
        for n in ("ANY_SOURCE", "ANY_TAG", "PROC_NULL", "Status", "Request", "CommError")
    },
    **{n: "communicator" for n in ("Communicator", "IN_PLACE")},
}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 module attribute
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
