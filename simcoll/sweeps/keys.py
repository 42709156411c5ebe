"""A point's key: what identifies its result in a results directory.

The key hashes a point's parameters, so that a resumed sweep runs exactly
the points it lacks; study expansions (:mod:`.study`, :mod:`.workloads`)
build the parameters, and nothing else is needed to key them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["point_key"]


def point_key(params: Mapping[str, Any]) -> str:
    """The hex key of a point: SHA-256 of its parameters as canonical JSON (24 hex digits)."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
