"""Calibration of simcoll's models from measurements users already have.

:mod:`simcoll.calibration.nccl_tests` reads the output of NVIDIA's nccl-tests
and AMD's rccl-tests (any ``*_perf`` tool) into :class:`NcclTestsLog` objects;
the fitting code builds on them and stays independent of where the timings
come from.
"""

from .nccl_tests import (
    NcclTestsLog,
    NcclTestsLogError,
    NcclTestsRow,
    bus_factor,
    parse_nccl_tests,
    read_nccl_tests,
)

__all__ = [
    "NcclTestsLog",
    "NcclTestsLogError",
    "NcclTestsRow",
    "bus_factor",
    "parse_nccl_tests",
    "read_nccl_tests",
]
