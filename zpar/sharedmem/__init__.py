"""Large buffers between processes of one host through shared memory (design.md,
"Same-host data plane").

A buffer of at least SHM_MIN_BYTES sent to a peer on this host is written once into a
private memory file (memfd, mode 0600, never named in /dev/shm) and the signed envelope
names it in place of the buffer's tag (zpar.wire.SegmentRef): the receiver maps it
copy-on-write and reads it without a copy. The modules, one job each:

- segment: one memory file with its header page (token, hold slots), the owner's mapping
- pool: the owner's segments, reused once every receiver let go (fresh pages cost 10x a copy)
- receipts: the receiver's side: a named segment mapped privately, held while used
- carrier: what the client and the engine call: outbound / inbound / shared_array
"""

from __future__ import annotations

# the package's API is the carrier's, named once there
from .carrier import *  # noqa: F403
from .carrier import __all__ as __all__
