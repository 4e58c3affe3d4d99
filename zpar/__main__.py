"""`python -m zpar` is the `zpar` command."""

import sys

from .cli import main

sys.exit(main())
