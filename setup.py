"""The compiled part of zpar: the communicator's same-host lane (communicator/_lane.pyx).

Everything else is in pyproject.toml. The extension is optional, as msgpack's and pyzmq's
speedups are: without a C compiler (or without Cython) the build logs why and installs the
pure-Python twin (communicator/lanepy.py), which zpar.comm.lane then uses.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that leaves an extension out instead of failing the install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any compiler or Cython failure
            print(
                f"zpar: compiled lane not built ({e}); using the pure-Python twin", file=sys.stderr
            )

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            print(f"zpar: {ext.name} not built ({e}); using the pure-Python twin", file=sys.stderr)


def extensions() -> list:
    if os.environ.get("ZPAR_NO_COMPILE") == "1" or not sys.platform.startswith("linux"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("zpar: Cython missing; using the pure-Python twin", file=sys.stderr)
        return []
    ext = Extension("zpar.comm._lane", ["communicator/_lane.pyx"], extra_compile_args=["-O2"])
    try:
        return cythonize([ext], language_level=3, quiet=True)
    except Exception as e:  # noqa: BLE001
        print(f"zpar: cythonize failed ({e}); using the pure-Python twin", file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
