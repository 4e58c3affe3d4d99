"""Relay copies in batches: how engines and the MUX relay pack what they tell the hub.

A relay copy (zpar.wire.monitor) is ``[kind, ident, ident, <ZPAR|MSG>, signature, envelope,
small buffers…]``, one monitor message each. A process that makes copies faster than the
hub should wake for them (an engine serving direct calls, the MUX relay) sends those queued
within an interval as one ``[copy_batch, msgpack array of copies]`` (MON_COPY_BATCH), each
copy its frames as bin; the hub checks each as if it had come alone (hub.hub). A copy with
a large frame (a result for the store) travels alone, never copied into msgpack.
"""

from __future__ import annotations

from typing import Any

import msgpack

from zpar.wire.messages import MON_COPY_BATCH, MON_MUX_IN, MON_MUX_OUT

_packb = msgpack.Packer(use_bin_type=True).pack

#: Copies packed in one monitor message at most (a hub turn reads a batch whole).
COPY_BATCH_MAX = 256
#: Bytes a copy may hold to be packed: larger ones (a result for the store) travel alone,
#: without being copied into msgpack.
COPY_PACK_MAX = 64 * 1024
#: The kinds a copy batch may carry.
COPY_KINDS = frozenset({MON_MUX_IN, MON_MUX_OUT})


def batchable_copy(frames: list[Any]) -> bool:
    """Whether a copy may travel packed: all its frames bytes, together under COPY_PACK_MAX."""
    total = 0
    for f in frames:
        if type(f) is not bytes:
            return False
        total += len(f)
    return total <= COPY_PACK_MAX


def pack_copies(copies: list[list[bytes]]) -> list[bytes]:
    """The monitor message carrying these copies (each as batchable_copy allows)."""
    return [MON_COPY_BATCH, _packb(copies)]


def unpack_copies(data: Any) -> list[list[bytes]]:
    """The copies of a batch, each a list of bytes starting with its kind; ValueError
    naming what is wrong when the batch is malformed (it is then dropped whole)."""
    try:
        copies = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for garbage
        raise ValueError(f"a copy batch must be msgpack: {e}") from None
    if type(copies) is not list or len(copies) > COPY_BATCH_MAX:
        raise ValueError(f"a copy batch must be a list of at most {COPY_BATCH_MAX} copies")
    for c in copies:
        if type(c) is not list or not c or not all(type(f) is bytes for f in c):
            raise ValueError("each copy of a batch must be a non-empty list of bin frames")
        if c[0] not in COPY_KINDS:
            raise ValueError(f"a copy batch cannot carry {c[0][:32]!r}")
    return copies
