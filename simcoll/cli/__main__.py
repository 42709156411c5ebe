"""``python -m simcoll.cli``: the ``simcoll`` command."""

import sys

from . import main

sys.exit(main())
