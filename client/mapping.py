"""Maps: how a view's ``map`` cuts its sequences into chunks, packs and sends them.

One apply_request per chunk runs ``zpar.mapchunk.map_chunk`` on an engine: a loop over
the chunk whose results come back as one list. The function is pickled once per map
(``zpar.serialize.pickle_once``), not once per chunk, and each chunk carries its part of
every sequence as the slice itself: a range slice is a range (O(1) to pickle), a numpy
slice a view sent without a copy, a list slice one pickle (the standard pickle when its
elements are plain values). The AsyncMapResult holds one future per chunk and flattens
the chunks' lists back in order.

Default chunking of a LoadBalancedView map (chunksize=None): ``auto_chunks``, see
docs/decisions.md "Map chunking" for the figures that chose it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zpar.elements import ELEMENTS
from zpar.errors import SerializationError
from zpar.mapchunk import map_chunk
from zpar.serialize import pickle_once, serialize_object

from .asyncresult import AsyncMapResult
from .baseview import _check_callable, _fname
from .mapparts import MapWaiters
from .partition import as_sequences, partition

#: A load-balanced map without a chunksize is cut into at most this many chunks per
#: engine...
AUTO_CHUNKS_PER_ENGINE = 4
#: ...of at least this many elements each, except that every engine gets a chunk while
#: there are elements for each (a map of n <= engines elements: one task per element, as
#: ipyparallel's chunksize=1). About the number of no-op elements that cost as much CPU as
#: a chunk's message does now (1.6 ms vs 0.17 us each): lower it as the task path gets
#: cheaper. chunksize=1 gives ipyparallel's one task per element.
AUTO_MIN_CHUNK = 4000

_MAP_CHUNK = pickle_once(map_chunk)


def auto_chunks(n: int, engines: int) -> int:
    """How many chunks a load-balanced map of ``n`` elements over ``engines`` engines is
    cut into when the user gave no chunksize (docs/decisions.md "Map chunking"): as many
    as hold AUTO_MIN_CHUNK elements each, at least one per engine, at most
    AUTO_CHUNKS_PER_ENGINE per engine, never more than ``n``."""
    engines = max(1, engines)
    wanted = min(engines * AUTO_CHUNKS_PER_ENGINE, n // AUTO_MIN_CHUNK)
    return min(n, max(engines, wanted))


def check_chunksize(chunksize: Any) -> int:
    if not isinstance(chunksize, int) or isinstance(chunksize, bool) or chunksize < 1:
        raise ValueError(f"chunksize must be a positive int, got {chunksize!r}")
    return chunksize


class ChunkPacker:
    """The apply_request frames of each chunk of one map: ``map_chunk(f, *parts,
    start=i)`` with ``f`` pickled once for all of them."""

    __slots__ = ("_head", "_seqs")

    def __init__(self, f: Any, seqs: Sequence[Any]) -> None:
        self._head = pickle_once(f)
        self._seqs = seqs

    def frames(self, start: int, stop: int) -> list[Any]:
        sl = slice(start, stop)
        args = (self._head, *(s[sl] for s in self._seqs))
        try:
            return serialize_object((_MAP_CHUNK, args, {"start": start} if start else {}))
        except Exception as e:
            raise SerializationError(
                f"cannot send elements {start}..{stop - 1} of the map: "
                f"{type(e).__name__}: {e}. Nothing was sent."
            ) from e


def send_map(
    view: Any,
    f: Any,
    seqs: Sequence[Any],
    *,
    chunksize: int | None,
    engine_ids: Sequence[int] | None,
    metadata: dict[str, Any] | None,
    ordered: bool = True,
    return_exceptions: bool = False,
    track: bool = False,
    engines: int | None = None,
    send_to: Callable[..., Any] | None = None,
) -> AsyncMapResult:
    """Send one map: on the task channel in chunks of ``chunksize`` (None: the default
    for ``engines`` engines, all registered ones if None), or, given ``engine_ids``, one
    contiguous chunk to each of those engines (a DirectView's map), each sent by
    ``send_to(engine_id, frames, metadata, track=...)`` when given (a BroadcastView's
    path: it returns the chunk's ``msg_id`` and ``future``). Returns its AsyncMapResult,
    remembered by the client."""
    _check_callable(f)
    seqs, n = as_sequences(seqs)
    sender = view.client.sender
    elements = False
    if engine_ids is None:
        if chunksize is None:  # the default: one task per element, several to a request
            count = len(sender.ids) if engines is None else engines
            parts = partition(n, auto_chunks(n, count)) if n else []
            bounds = [(sl.start, sl.stop) for sl in parts]
            elements = n > 0
        else:
            size = check_chunksize(chunksize)
            bounds = [(start, min(n, start + size)) for start in range(0, n, size)]
        targets: Sequence[int | None] = [None] * len(bounds)
        channel = "task"
    else:
        each = [(sl.start, sl.stop) for sl in partition(n, len(engine_ids))]
        # fewer elements than engines: no empty chunks (an empty map still sends one)
        pairs = [(e, b) for e, b in zip(engine_ids, each, strict=True) if b[1] > b[0] or not n]
        targets = [e for e, _ in pairs]
        bounds = [b for _, b in pairs]
        channel = "mux"
    packer = ChunkPacker(f, seqs)
    packed = [packer.frames(start, stop) for start, stop in bounds]  # all, or none is sent
    msg_ids, futs, sizes, requests = [], [], [], []
    waiters = MapWaiters() if elements else None
    for eid, (start, stop), frames in zip(targets, bounds, packed, strict=True):
        md = metadata
        size = stop - start
        if elements:  # its positions [0, size): each a task, answered in parts
            md = {**(metadata or {}), ELEMENTS: [0, size]}
        if send_to is not None and eid is not None:
            sent = send_to(eid, frames, md, track=track)
            msg_ids.append(sent.msg_id)
            futs.append(sent.future)
            sizes.append(size)
            continue
        r = sender.apply(
            channel,
            eid,
            None,
            (),
            {},
            metadata=md,
            buffers=frames,
            track=track,
            elements=size if elements else None,
            waiters=waiters,
        )
        msg_ids.append(r.msg_id)
        futs.append(r.future)
        sizes.append(size)
        requests.append(r)
    ar = view._result(
        _fname(f),
        msg_ids,
        futs,
        cls=AsyncMapResult,
        ordered=ordered,
        chunk_sizes=sizes,
        return_exceptions=return_exceptions,
        parts=[r.parts for r in requests] if elements else None,
        waiters=waiters,
    )
    if track:
        ar.wait_for_send()
    return ar
