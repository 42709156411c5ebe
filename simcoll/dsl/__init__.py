"""GC3/MSCCLang-style chunk DSL (being written)."""
