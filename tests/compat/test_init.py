"""ipyparallel/__init__.py: every name `import ipyparallel as ipp` gives, from zpar."""

from __future__ import annotations

import concurrent.futures

import pytest

import zpar as ipp

#: ipyparallel 9.2's top-level names (its __init__ and the __all__ of the modules it
#: star-imports; error.py has no __all__, so all its public names)
IPP_NAMES = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "__version__",
    "version_info",
    "AsyncResult",
    "AsyncMapResult",
    "AsyncHubResult",
    "Client",
    "remote",
    "parallel",
    "RemoteFunction",
    "ParallelFunction",
    "LoadBalancedView",
    "DirectView",
    "ViewExecutor",
    "BroadcastView",
    "Cluster",
    "depend",
    "require",
    "dependent",
    "Dependency",
    "IPythonError",
    "KernelError",
    "EngineError",
    "NoEnginesRegistered",
    "TaskAborted",
    "TaskTimeout",
    "TimeoutError",
    "UnmetDependency",
    "ImpossibleDependency",
    "DependencyTimeout",
    "InvalidDependency",
    "RemoteError",
    "TaskRejectError",
    "CompositeError",
    "AlreadyDisplayedError",
    "Reference",
    "PrePickled",
    "can_map",
    "uncan_map",
    "can",
    "uncan",
    "use_dill",
    "use_cloudpickle",
    "use_pickle",
    "serialize_object",
    "deserialize_object",
    "pack_apply_message",
    "unpack_apply_message",
    "interactive",
    "bind_kernel",
    "register_joblib_backend",
]


@pytest.mark.parametrize("name", IPP_NAMES)
def test_every_ipyparallel_top_level_name_exists(name):
    assert getattr(ipp, name) is not None
    assert name in ipp.__all__ or name.startswith("__")


def test_return_when_constants_are_concurrent_futures():
    assert ipp.ALL_COMPLETED == concurrent.futures.ALL_COMPLETED
    assert ipp.FIRST_COMPLETED == concurrent.futures.FIRST_COMPLETED
    assert ipp.FIRST_EXCEPTION == concurrent.futures.FIRST_EXCEPTION


def test_same_objects_from_the_submodule_paths():
    from zpar.client.asyncresult import AsyncHubResult, AsyncMapResult, AsyncResult
    from zpar.client.remotefunction import ParallelFunction, RemoteFunction, parallel, remote
    from zpar.client.view import BroadcastView, DirectView, LoadBalancedView, ViewExecutor
    from zpar.error import CompositeError, RemoteError
    from zpar.serialize import Reference, can, uncan
    from zpar.util import interactive

    assert (ipp.AsyncResult, ipp.AsyncMapResult, ipp.AsyncHubResult) == (
        AsyncResult,
        AsyncMapResult,
        AsyncHubResult,
    )
    assert (ipp.remote, ipp.parallel) == (remote, parallel)
    assert (ipp.RemoteFunction, ipp.ParallelFunction) == (RemoteFunction, ParallelFunction)
    assert (ipp.DirectView, ipp.LoadBalancedView, ipp.BroadcastView) == (
        DirectView,
        LoadBalancedView,
        BroadcastView,
    )
    assert ipp.ViewExecutor is ViewExecutor
    assert (ipp.RemoteError, ipp.CompositeError) == (RemoteError, CompositeError)
    assert (ipp.Reference, ipp.can, ipp.uncan, ipp.interactive) == (
        Reference,
        can,
        uncan,
        interactive,
    )


def test_the_ipyparallel_module_paths_users_import():
    """The paths ipyparallel's users and examples import from, beside ``import ipyparallel
    as ipp``: the same objects under zpar."""
    from zpar import error, util
    from zpar.client._joblib import IPythonParallelBackend as Backend
    from zpar.cluster import Cluster
    from zpar.controller.dependency import Dependency, depend, dependent, require
    from zpar.datapub import publish_data
    from zpar.joblib import IPythonParallelBackend, register
    from zpar.serialize import pack_apply_message, serialize_object, unpack_apply_message

    assert error.TaskAborted is ipp.error.TaskAborted is ipp.TaskAborted
    assert util.interactive is ipp.interactive and Cluster is ipp.Cluster
    assert (Dependency, depend, dependent, require) == (
        ipp.Dependency,
        ipp.depend,
        ipp.dependent,
        ipp.require,
    )
    assert (pack_apply_message, unpack_apply_message, serialize_object) == (
        ipp.pack_apply_message,
        ipp.unpack_apply_message,
        ipp.serialize_object,
    )
    assert IPythonParallelBackend is Backend and callable(register) and callable(publish_data)
    with pytest.raises(ImportError, match="ClusterManager"):
        from zpar.cluster import ClusterManager  # noqa: F401  (n/a: docs/api.md)


def test_bind_kernel_outside_an_engine_says_where_to_call_it():
    """As ipyparallel's: a RuntimeError outside an engine (the cluster test binds one)."""
    with pytest.raises(RuntimeError, match="must be called on an engine"):
        ipp.bind_kernel()


def test_version_info_is_a_tuple():
    assert isinstance(ipp.version_info, tuple) and ipp.__version__.startswith(
        ".".join(map(str, ipp.version_info[:2]))
    )


@pytest.mark.cluster  # a fresh interpreter: nothing imported the submodules before
def test_submodules_are_attributes_as_after_import_ipyparallel():
    """``import ipyparallel as ipp; ipp.error.RemoteError`` works: so does it with zpar."""
    import subprocess
    import sys

    code = (
        "import zpar as ipp\n"
        "assert ipp.error.RemoteError is ipp.RemoteError\n"
        "assert ipp.util.interactive is ipp.interactive\n"
        "assert ipp.serialize.use_pickle is ipp.use_pickle\n"
        "assert ipp.client.view.DirectView is ipp.DirectView\n"
        "assert ipp.controller.dependency.require is ipp.require\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
