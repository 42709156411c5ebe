"""Interoperability with other toolchains, and schedules in files.

- :mod:`~simcoll.interop.schedules`: the one place that tells file formats
  apart: :func:`load_schedules`, :func:`load_schedule`,
  :func:`parse_schedules`, :func:`save_schedule`;
- :mod:`~simcoll.interop.msccl_xml`: MSCCL XML (the runtime format of MSCCL
  and RCCL, GC3-IR) to and from :class:`~simcoll.program.Program`;
- :mod:`~simcoll.interop.sccl_json`: the public SCCL synthesizer's algorithm
  JSON into :class:`~simcoll.algorithm.Algorithm`.
"""

from .msccl_xml import (
    DEFAULT_DIALECT,
    DIALECTS,
    export_msccl_xml,
    parse_msccl_xml,
    parse_msccl_xml_all,
    read_msccl_xml,
    read_msccl_xml_all,
    write_msccl_xml,
)
from .sccl_json import algorithm_from_sccl_dict, is_sccl_json, parse_sccl_json, read_sccl_json
from .schedules import SAVE_FORMATS, guess_format, load_schedule, load_schedules, parse_schedules, save_schedule

__all__ = [
    "DEFAULT_DIALECT",
    "DIALECTS",
    "SAVE_FORMATS",
    "algorithm_from_sccl_dict",
    "export_msccl_xml",
    "guess_format",
    "is_sccl_json",
    "load_schedule",
    "load_schedules",
    "parse_msccl_xml",
    "parse_msccl_xml_all",
    "parse_schedules",
    "parse_sccl_json",
    "read_msccl_xml",
    "read_msccl_xml_all",
    "read_sccl_json",
    "save_schedule",
    "write_msccl_xml",
]
