"""Interoperability: MSCCL XML and SCCL JSON (being written)."""
