"""``python -m simcoll``: the ``simcoll`` command."""

import sys

from .ctrl_c import caused_by_ctrl_c, report_interrupt

try:
    from .cli import main
except (KeyboardInterrupt, ImportError) as exc:  # Ctrl-C while the command line is still loading: same as later
    if not caused_by_ctrl_c(exc):
        raise
    sys.exit(report_interrupt())

sys.exit(main())
