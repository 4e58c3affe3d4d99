"""Engines talking to each other: a communicator bootstrapped by a rendezvous (issue 16).

The rendezvous (``zpar.comm.rendezvous``) is the IMPI server's role, driven by the hub
(``zpar.comm.hubservice``) or by a stand-alone byte-exact IMPI server
(``zpar.comm.impi_server``); engines join it through ``zpar.comm.member``.
"""
