"""Wall-clock figures of a JSON report set apart, so that two runs' outputs differ only under ``stats``."""

from __future__ import annotations

from typing import Any


def is_timing(key: str) -> bool:
    """Whether a report key names a measured duration (``seconds``, ``declare_seconds`` …)."""
    return key == "seconds" or key.endswith("_seconds")


def split_timings(tree: dict[Any, Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """(``tree`` without its timing keys, those keys at the same paths); a timing key's value moves whole.

    >>> split_timings({"a": 1, "seconds": 2.0, "cert": {"n": 3, "per": {1: {"seconds": 0.5, "q": 1}}}})
    ({'a': 1, 'cert': {'n': 3, 'per': {1: {'q': 1}}}}, {'seconds': 2.0, 'cert': {'per': {1: {'seconds': 0.5}}}})
    """
    kept: dict[Any, Any] = {}
    timed: dict[Any, Any] = {}
    for key, value in tree.items():
        if isinstance(key, str) and is_timing(key):
            timed[key] = value
        elif isinstance(value, dict):
            kept[key], inner = split_timings(value)
            if inner:
                timed[key] = inner
        else:
            kept[key] = value
    return kept, timed
