"""``simcoll sweep``: the experiments command group (implemented in
:mod:`simcoll.experiments.command`, so that ``python -m simcoll.experiments``
runs the same code).

    simcoll sweep STUDY.yaml -o results/NAME [--scheduler ADDR] [--workers N] [--resume] [--serial]
    simcoll sweep status results/NAME [--json]
"""

from __future__ import annotations

from ..experiments.command import cmd_sweep, register

__all__ = ["cmd_sweep", "register"]
