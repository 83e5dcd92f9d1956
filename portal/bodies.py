"""Limits on parsed request bodies shared by the REST API and the gateway.

Python's `json` recurses once per nesting level, and so does much code that walks the result
(serializers, translation, `copy.deepcopy`): a body nested a few thousand levels deep would raise
`RecursionError` somewhere far from the parser. Bodies deeper than `MAX_DEPTH` are refused up
front with a 400; no real request of ours comes near it.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `data` (parsed JSON) nests lists and objects more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
