"""ipyparallel/client/asyncresult.py: AsyncResult, AsyncMapResult, AsyncHubResult."""

from __future__ import annotations

import os
import time
from datetime import datetime

import pytest

import zpar as ipp


def _gate(path):
    """A task that waits until ``path`` exists (the test opens the gate)."""

    def wait_for_gate():
        import os
        import time

        while not os.path.exists(path):
            time.sleep(0.01)
        return os.getpid()

    return wait_for_gate


def test_timing_metadata_is_none_until_known_then_utc_datetimes(rc, tmp_path):
    gate = tmp_path / "gate"
    ar = rc[0].apply_async(_gate(str(gate)))
    assert ar.completed is None and ar.received is None  # never waits
    assert ar["completed"] is None and ar.metadata["completed"] is None
    assert ar.stdout == ""  # ipyparallel's default until output arrives
    assert isinstance(ar.submitted, datetime) and ar.submitted.tzinfo is not None
    with pytest.raises(TimeoutError, match="not ready"):
        ar.wall_time  # noqa: B018
    with pytest.raises(TimeoutError, match="not ready"):
        ar.serial_time  # noqa: B018
    assert ar.elapsed >= 0
    gate.touch()
    ar.get(timeout=30)
    assert ar.submitted <= ar.started <= ar.completed
    assert ar.completed.tzinfo is not None
    assert (ar.completed - ar.started).total_seconds() == pytest.approx(ar.serial_time)
    assert ar.wall_time >= ar.serial_time and ar.elapsed == ar.wall_time
    assert ar.timedelta(ar.submitted, ar.completed) == pytest.approx(ar.wall_time)


def test_metadata_keys_and_attribute_access(rc):
    ar = rc[:].apply_async(lambda: print("hi"))
    ar.get(timeout=30)
    assert ar.engine_id == [0, 1] and ar.stdout == ["hi\n", "hi\n"]
    assert ar.status == ["ok", "ok"] and ar["engine_id"] == [0, 1]
    for key in ("msg_id", "engine_uuid", "received", "outputs", "execute_result", "error"):
        assert len(getattr(ar, key)) == 2
    assert "received" in dir(ar)
    md = ar.metadata[0]
    assert md.engine_id == md["engine_id"] == 0 and md.stdout == "hi\n"  # ipp's Metadata
    with pytest.raises(AttributeError):
        ar.not_a_metadata_key  # noqa: B018
    ex = rc[0].execute("1 + 1", silent=False, block=False)  # silent: no execute_result
    ex.get(timeout=30)
    assert ex.execute_result is not None


def test_split_returns_a_tuple_and_join_takes_varargs(rc):
    ar = rc[:].apply_async(os.getpid)
    parts = ar.split()
    assert isinstance(parts, tuple) and len(parts) == 2
    assert [p.get(timeout=30) for p in parts] == ar.get(timeout=30)
    single = rc[0].apply_async(os.getpid)
    assert single.split() == (single,)
    joined = ipp.AsyncResult.join(*parts)
    assert joined.get() == ar.get() and joined.msg_ids == ar.msg_ids
    assert ipp.AsyncResult.join(parts[0]) is parts[0]


def test_wait_with_return_when_gives_done_and_pending(rc, tmp_path):
    gate = tmp_path / "gate"
    slow = rc[0].apply_async(_gate(str(gate)))
    fast = rc[1].apply_async(os.getpid)
    fast.get(timeout=30)
    both = slow + fast
    done, pending = both.wait(timeout=10, return_when=ipp.FIRST_COMPLETED)
    assert [d.msg_ids for d in done] == [fast.msg_ids]
    assert [p.msg_ids for p in pending] == [slow.msg_ids]
    assert both.wait(0.01) is False
    gate.touch()
    assert both.wait(30) is True
    done, pending = both.wait(return_when=ipp.ALL_COMPLETED)
    assert len(done) == 2 and not pending


def test_get_return_when_first_exception_raises_without_waiting(rc, tmp_path):
    gate = tmp_path / "gate"

    def fail():
        raise RuntimeError("early")

    slow = rc[0].apply_async(_gate(str(gate)))
    bad = rc[1].apply_async(fail)
    both = slow + bad
    with pytest.raises(ipp.RemoteError, match="early"):
        both.get(timeout=30, return_when=ipp.FIRST_EXCEPTION)
    assert not slow.ready()
    gate.touch()
    with pytest.raises(ipp.CompositeError) as info:
        both.get(timeout=30)
    assert str(info.value).startswith("one or more exceptions raised in")


def test_successful_abort_and_ready(rc, tmp_path):
    gate = tmp_path / "gate"
    ar = rc[0].apply_async(_gate(str(gate)))
    with pytest.raises(RuntimeError):
        ar.successful()  # not done yet
    queued = rc[0].apply_async(os.getpid)
    queued.abort()
    # the abort travels client -> relay -> engine while the engine runs the gate task; an
    # engine reads control only between tasks, so nothing can observe its arrival: give it
    # time before the gate opens (it raced the next queued request under load)
    time.sleep(1.0)
    gate.touch()
    with pytest.raises(ipp.TaskAborted):
        queued.get(timeout=30)
    ar.get(timeout=30)
    assert ar.successful()
    with pytest.raises(RuntimeError, match="already done"):
        ar.abort()


def test_async_map_result_counts_elements(rc, tmp_path):
    amr = rc[:].map_async(lambda x: x, range(7))
    assert len(amr) == 7
    amr.get(timeout=30)
    assert amr.progress == 7 and list(amr) == list(range(7)) and amr[2] == 2
    assert amr.r == list(range(7))


def test_get_dict_and_result_dict(rc):
    ar = rc[:].apply_async(lambda: 1)
    assert ar.get_dict(timeout=30) == {0: 1, 1: 1} == ar.result_dict


def test_wait_for_send_and_sent(rc):
    import numpy as np

    a = np.zeros(1_000_000)
    ar = rc[:].apply_async(np.sum, a)
    assert ar.wait_for_send(timeout=30) and ar.sent
    ar.get(timeout=30)


def test_wait_interactive_returns_and_never_hangs(rc, tmp_path, capsys):
    ar = rc.load_balanced_view().map_async(lambda x: x, range(4))
    ar.wait_interactive(interval=0.05, widget=False)
    assert ar.ready()
    gate = tmp_path / "gate"
    slow = rc[0].apply_async(_gate(str(gate)))
    t0 = time.monotonic()
    assert slow.wait_interactive(interval=0.05, timeout=0.3, widget=False) is False
    assert time.monotonic() - t0 < 20  # bounded by its timeout (ipyparallel's hang: fixed)
    gate.touch()
    assert slow.wait_interactive(return_when=ipp.FIRST_COMPLETED, widget=False)


def test_display_outputs_groupby(rc, capsys):
    ar = rc[:].apply_async(lambda: print("out"))
    ar.get(timeout=30)
    capsys.readouterr()
    ar.display_outputs()  # by type (ipyparallel's default)
    assert capsys.readouterr().out == "[stdout:0] \nout\n[stdout:1] \nout\n"
    ar.display_outputs(result_only=True)
    assert capsys.readouterr().out == ""


def _prints(x):
    import sys

    print("elem", x)
    if x % 3 == 0:
        print("err", x, file=sys.stderr)
    return x


def _as_ipyparallel_displays(texts):
    """What ipyparallel's display_outputs prints for (engine id, stream, text) in order
    (its _display_stream: a header when engine or stream changes)."""
    out, last, trailing = [], "", True
    for eid, stream, text in texts:
        if not text:
            continue
        prefix = f"[{stream}:{eid}] "
        if prefix == last:
            out.append(text)
        else:
            out.append(("" if trailing else "\n") + prefix + "\n" + text)
            last = prefix
        trailing = text.endswith("\n")
    return "".join(out)


def test_a_maps_elements_each_have_their_own_output(rc, capsys):
    """ipyparallel's default load-balanced map is one task per element, each with its own
    stdout and stderr (seen on ipyparallel 9.2.0: ``lv.map_async(f, range(12)).stdout ==
    ['elem 0\\n', ..., 'elem 11\\n']``), not its run's text on every element (or on the
    last): so are ar.stdout, ar.metadata, display_outputs and the hub's record of each."""
    from tests.clusters import wait_until

    ar = rc.load_balanced_view().map_async(_prints, range(12))
    assert ar.get(timeout=30) == list(range(12))
    stdout = [f"elem {i}\n" for i in range(12)]
    stderr = [f"err {i}\n" if i % 3 == 0 else "" for i in range(12)]
    assert ar.stdout == stdout and ar.stderr == stderr
    assert ar.metadata[4]["stdout"] == "elem 4\n" and ar.metadata[3]["stderr"] == "err 3\n"
    capsys.readouterr()
    ar.display_outputs()
    shown = capsys.readouterr()
    eids = ar.engine_id
    assert shown.out == _as_ipyparallel_displays(zip(eids, ["stdout"] * 12, stdout, strict=True))
    assert shown.err == _as_ipyparallel_displays(zip(eids, ["stderr"] * 12, stderr, strict=True))

    def recorded():
        recs = rc.db_query({"msg_id": {"$in": ar.msg_ids}}, keys=["msg_id", "stdout", "stderr"])
        return {r["msg_id"]: (r["stdout"], r["stderr"]) for r in recs if r["stdout"]}

    wait_until(lambda: len(recorded()) == 12, "the hub's records of the 12 elements")
    assert recorded() == dict(zip(ar.msg_ids, zip(stdout, stderr, strict=True), strict=True))


def test_await_an_async_result(rc):
    import asyncio

    async def main():
        return await rc[0].apply_async(lambda: 3)

    assert asyncio.run(main()) == 3


def test_async_hub_result_for_another_clients_task(cluster, rc):
    ar = rc[0].apply_async(lambda: 11)
    ar.get(timeout=30)
    other = cluster.connect_client_sync()
    try:
        fetched = other.get_result(ar.msg_ids[0], block=True)
        assert isinstance(fetched, ipp.AsyncHubResult) and fetched.get(timeout=30) == 11
    finally:
        other.close()


def test_async_results_are_concurrent_futures(rc, tmp_path):
    import asyncio
    import concurrent.futures

    gate = tmp_path / "gate"
    slow = rc[0].apply_async(_gate(str(gate)))
    fast = rc[1].apply_async(os.getpid)
    assert isinstance(slow, concurrent.futures.Future)
    done, pending = concurrent.futures.wait(
        [slow, fast], timeout=30, return_when=concurrent.futures.FIRST_COMPLETED
    )
    assert done == {fast} and pending == {slow}
    gate.touch()
    assert {f.result() for f in concurrent.futures.as_completed([slow, fast], timeout=30)} == {
        slow.get(),
        fast.get(),
    }

    async def main():
        return await asyncio.wrap_future(rc[0].apply_async(lambda: 9))

    assert asyncio.run(main()) == 9
    assert not slow.cancel() and not slow.cancelled()


def test_unknown_metadata_keys_and_split_of_a_map(rc):
    ar = rc[:].apply_async(lambda: 1)
    with pytest.raises(KeyError):
        ar["foo"]  # noqa: B018
    assert not hasattr(ar, "foo") and not hasattr(ar, "__length_hint__")
    ar.get(timeout=30)
    with pytest.raises(KeyError):
        ar["foo"]  # noqa: B018
    amr = rc.load_balanced_view().map_async(lambda x: x, range(5), chunksize=1)
    parts = amr.split()
    amr.get(timeout=30)
    assert [type(p) for p in parts] == [ipp.AsyncResult] * 5  # not map results
    assert [p.get() for p in parts] == [[[i]] for i in range(5)]  # each part: [its chunk]


def test_error_engine_info_names_the_method(rc):
    for call, method in (
        (lambda: rc[:].apply_async(lambda: 1 / 0), "apply"),
        (lambda: rc[:].execute("1 / 0", block=False), "execute"),
    ):
        with pytest.raises(ipp.CompositeError) as info:
            call().get(timeout=30)
        infos = [e[-1] for e in info.value.elist]
        assert [(i["engine_id"], i["method"]) for i in infos] == [(0, method), (1, method)]
        assert all(i["engine_uuid"] for i in infos)


def test_execute_result_metadata(rc):
    ar = rc[:].execute("5", silent=False, block=True)
    assert [out["data"] for out in ar.execute_result] == [{"text/plain": "5"}] * 2


# -- issue 24: pinned from ipyparallel 9.2.0's test_asyncresult.py -----------------------


def test_display_outputs_of_a_single_result_has_no_prefixes(rc, capsys):
    """ipyparallel's _display_single_result: rc[i] / a load-balanced apply prints its
    streams as they are (test_display_empty_streams_single, test_display_output_error)."""
    ar = rc[-1].execute("print(5555)\nimport sys; print('e', file=sys.stderr)")
    ar.get(timeout=30)
    ar.display_outputs()
    captured = capsys.readouterr()
    assert captured.out == "5555\n" and captured.err == "e\n"
    ar = rc[-1].execute("print(5555)\n1/0")
    ar.get(timeout=30, return_exceptions=True)
    ar.display_outputs()
    assert capsys.readouterr().out == "5555\n"
    rc[:].execute("print(1)").get(timeout=30)
    lar = rc.load_balanced_view().apply_async(lambda: print("lb"))
    lar.get(timeout=30)
    lar.display_outputs()
    assert capsys.readouterr().out == "lb\n"


@pytest.mark.parametrize("chunksize", [None, 1])
def test_iterating_a_map_with_return_exceptions_yields_the_errors(rc, chunksize):
    """ipyparallel's test_return_exceptions: the error stands in its element's place, the
    same exception object at every read (the default map, one task per element, too)."""

    def fail_on_2(n):
        if n == 2:
            raise ValueError("two!")
        return n

    view = rc.load_balanced_view()
    amr = view.map(fail_on_2, range(4), return_exceptions=True, chunksize=chunksize)
    rlist = list(amr)
    assert isinstance(rlist[2], ipp.RemoteError) and rlist[2].ename == "ValueError"
    assert rlist == [0, 1, rlist[2], 3] and list(amr) == rlist and amr.get() == rlist
