"""The argument parser every zpar command uses: a bad argument is one line, exit code 2.

argparse's own error prints the whole usage first; with a dozen options that buries the one
line that matters. ``checked`` turns a zpar.cluster.names check into an argparse type, so its
message (naming the option's bad value) is the error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

#: Exit code of a bad command line (argparse's own).
RET_USAGE = 2


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(RET_USAGE)


def checked(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a check raising ValueError with a message naming the value."""

    def convert(value: str) -> Any:
        try:
            return check(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = getattr(check, "__name__", "value")
    return convert
