"""The compiled parts of zpar: the communicator's same-host lane (communicator/_lane.pyx)
and an engine's burst of map elements (engine/_burst.pyx).

Everything else is in pyproject.toml. The extensions are optional, as msgpack's and pyzmq's
speedups are: without a C compiler (or without Cython) the build logs why and installs the
pure-Python twins (communicator/lanepy.py, engine/burst.py's loop), which zpar then uses.
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
    exts = [
        Extension("zpar.comm._lane", ["communicator/_lane.pyx"], extra_compile_args=["-O2"]),
        Extension("zpar.engine._burst", ["engine/_burst.pyx"], extra_compile_args=["-O2"]),
    ]
    try:
        return cythonize(exts, language_level=3, quiet=True)
    except Exception as e:  # noqa: BLE001
        print(f"zpar: cythonize failed ({e}); using the pure-Python twin", file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
