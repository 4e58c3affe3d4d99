"""``ipyparallel.controller.dependency`` under zpar: the same names as zpar.dependency."""

from zpar.dependency import Dependency, depend, dependent, require

__all__ = ["Dependency", "depend", "dependent", "require"]
