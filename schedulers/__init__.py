"""zpar schedulers: the load-balancing task scheduler (``python -m zpar.schedulers``).

MUX, control and IOPub are C relays inside the controller (zpar.schedulers.relays).
"""
