"""Compiler from traced DSL programs and Algorithms to Programs (being written)."""
