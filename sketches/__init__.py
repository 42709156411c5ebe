"""TACCL communication sketches shipped with simcoll (JSON files, package data).

Load one by name or path with :func:`simcoll.synthesis.taccl.load_sketch`
(``load_sketch("ndv2-sk-1")``); the format is described in
:mod:`simcoll.synthesis.taccl.sketch`.
"""
