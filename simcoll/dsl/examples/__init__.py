"""The GC3 paper's programs, written in the DSL (being written)."""
