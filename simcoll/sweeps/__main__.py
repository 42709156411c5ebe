"""``python -m simcoll.sweeps STUDY.yaml -o DIR ...``: the ``simcoll sweep`` command."""

import sys

from .command import main

if __name__ == "__main__":
    sys.exit(main())
