"""A package named ``ipyparallel`` that is zpar: for running ipyparallel's own tests only.

It lives in zpar's test tree and is put first on ``sys.path`` of the subprocess that runs
ipyparallel 9.2.0's test files (tests/compat/ipyparallel_suite/test_suite.py); zpar never
installs it, so ``import ipyparallel`` in a user's environment finds ipyparallel or nothing.

``ipyparallel`` is ``zpar``'s namespace; ``ipyparallel.X.Y`` is ``zpar.X.Y`` (the same
module object), except ``ipyparallel.tests``: ipyparallel's test files, extracted from its
wheel next to this file, with a ``tests/__init__.py`` of ours that starts zpar processes
where ipyparallel's starts its own.
"""

import importlib
import importlib.abc
import importlib.util
import sys

import zpar

_PREFIX = __name__ + "."
_OWN = _PREFIX + "tests"


class _ZparAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``ipyparallel.X`` as the module ``zpar.X``."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX) or fullname == _OWN or fullname.startswith(_OWN + "."):
            return None
        zname = "zpar." + fullname[len(_PREFIX) :]
        try:
            found = importlib.util.find_spec(zname)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, is_package=found.submodule_search_locations is not None
        )

    def create_module(self, spec):
        return importlib.import_module("zpar." + spec.name[len(_PREFIX) :])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _ZparAlias())


def __getattr__(name):
    # ``ipp.name`` is exactly what ``import zpar as ipp`` gives (no import on the way)
    return getattr(zpar, name)


def __dir__():
    return sorted(set(dir(zpar)) | set(globals()))


__all__ = list(getattr(zpar, "__all__", ()))
__version__ = zpar.__version__
version_info = zpar.version_info
