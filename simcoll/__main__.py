"""``python -m simcoll``: the ``simcoll`` command."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line is still loading: same as later
    print("simcoll: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
