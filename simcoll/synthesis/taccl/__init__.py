"""TACCL synthesis (being written)."""
