"""``python -m simcoll``: the ``simcoll`` command."""

import sys

from .cli import main

sys.exit(main())
