"""``simcoll sweep``: the experiments command group (implemented in
:mod:`simcoll.sweeps.command`, so that ``python -m simcoll.sweeps``
runs the same code).

    simcoll sweep STUDY.yaml -o results/NAME [--scheduler ADDR] [--workers N] [--resume] [--serial]
    simcoll sweep status results/NAME [--json]
"""

from __future__ import annotations

from ..sweeps.command import cmd_sweep, register

__all__ = ["cmd_sweep", "register"]
