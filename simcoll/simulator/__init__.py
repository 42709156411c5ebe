"""Discrete-event simulator (being written)."""
