"""zpar.wire.frames: where the parts of a message sit."""

from __future__ import annotations

import pytest

from zpar.errors import RemoteProtocolError
from zpar.wire import (
    split_idents,
)


def test_split_idents_without_delimiter_names_the_problem():
    with pytest.raises(RemoteProtocolError, match="no-delimiter"):
        split_idents([b"a", b"b"])
