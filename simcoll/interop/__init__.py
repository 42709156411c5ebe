"""Interoperability with other toolchains: MSCCL XML (the runtime format of
MSCCL and RCCL, GC3-IR) to and from :class:`~simcoll.program.Program`, and the
public SCCL synthesizer's algorithm JSON into :class:`~simcoll.algorithm.Algorithm`.
"""

from .msccl_xml import DEFAULT_DIALECT, DIALECTS, export_msccl_xml, import_msccl_xml, import_msccl_xml_all
from .sccl_json import import_sccl_json, is_sccl_json

__all__ = [
    "DEFAULT_DIALECT",
    "DIALECTS",
    "export_msccl_xml",
    "import_msccl_xml",
    "import_msccl_xml_all",
    "import_sccl_json",
    "is_sccl_json",
]
