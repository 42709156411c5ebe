"""TACCL communication sketches shipped with simcoll (JSON files)."""
