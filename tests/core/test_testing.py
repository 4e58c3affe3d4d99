"""zpar.testing: the in-process cluster runs the real API without a process, keeps each
engine's namespace and output apart, and refuses clearly what only engine processes do."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import cloudpickle
import pytest

from zpar import namespace
from zpar.errors import InProcessUnsupported, RemoteError
from zpar.testing import InProcessCluster


def test_the_host_logging_and_streams_are_left_as_they_were():
    # first in the module: no other in-process cluster runs yet
    root = logging.getLogger()
    handlers = list(root.handlers)
    stdout, stderr = sys.stdout, sys.stderr
    with InProcessCluster(n=1) as c:
        assert c.client[:].apply_sync(lambda: 3) == [3]
        assert root.handlers == handlers
    assert (sys.stdout, sys.stderr) == (stdout, stderr)
    assert namespace._threads is None  # an engine process's rule again


@pytest.fixture(scope="module")
def stub():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with InProcessCluster(n=2) as c:
        yield c
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def client(stub):
    rc = stub.client
    rc.clear(block=True)
    return rc


def test_apply_map_and_scatter_reach_every_engine(client):
    dv = client[:]
    assert client.ids == [0, 1]
    assert dv.apply_sync(lambda x: x * 2, 21) == [42, 42]
    assert client.load_balanced_view().map_sync(lambda x: x + 1, range(6)) == [1, 2, 3, 4, 5, 6]
    dv.scatter("part", list(range(10)), block=True)
    assert dv.gather("part", block=True) == list(range(10))


def test_engines_run_in_threads_of_this_process(client):
    names = client[:].apply_sync(lambda: threading.current_thread().name)
    assert names == ["zpar-engine", "zpar-engine"]
    assert threading.current_thread() is threading.main_thread()


def test_each_engine_has_its_own_namespace(client):
    client[0].push({"who": "zero"}, block=True)
    client[1].push({"who": "one"}, block=True)
    assert client[:].pull("who", block=True) == ["zero", "one"]

    def read():
        return who  # noqa: F821 - pushed to each engine

    assert client[:].apply_sync(read) == ["zero", "one"]


def test_no_namespace_is_current_in_the_test_thread(stub):
    with pytest.raises(RuntimeError, match="no engine namespace"):
        namespace.current()


def test_each_task_output_goes_to_its_own_engine(client):
    def say(word):
        print(word)
        return word

    ars = [client[i].apply_async(say, f"engine-{i}") for i in (0, 1)]
    assert [ar.get(10) for ar in ars] == ["engine-0", "engine-1"]
    assert [ar.stdout for ar in ars] == ["engine-0\n", "engine-1\n"]


def test_a_time_limit_is_refused_naming_why(client):
    lv = client.load_balanced_view()
    lv.set_flags(time_limit=5)
    with pytest.raises(RemoteError, match="time_limit") as e:
        lv.apply_sync(lambda: 1)
    assert e.value.ename == InProcessUnsupported.__name__


def test_a_signal_is_refused_before_it_is_sent(client):
    with pytest.raises(InProcessUnsupported, match="signal"):
        client.send_signal(signal.SIGINT)


def test_a_restart_is_refused(client):
    with pytest.raises(RemoteError, match="cannot restart"):
        client.shutdown(targets=0, restart=True, block=True)
    assert client[0].apply_sync(lambda: 1) == 1


def test_bad_arguments_say_what_was_wrong():
    with pytest.raises(ValueError, match="at least 1 engine"):
        InProcessCluster(n=0)
    with pytest.raises(RuntimeError, match="not started"):
        InProcessCluster(n=1).client  # noqa: B018 - the property raises
