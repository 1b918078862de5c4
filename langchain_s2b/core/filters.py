"""Metadata filters: Mongo-style dicts (``{"year": {"$gte": 2020}}``) or callables.

Used by :class:`~langchain_s2b.store.faiss_index.FaissIndex`, which post-filters its
search results (FAISS itself has no metadata).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

Filter = dict[str, Any] | Callable[[dict[str, Any]], bool]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
    "$in": lambda value, options: value in options,
    "$nin": lambda value, options: value not in options,
}


def matches_filter(metadata: dict[str, Any], flt: Filter | None) -> bool:
    """Whether ``metadata`` passes a filter: a callable or a Mongo-style dict."""
    if flt is None:
        return True
    if callable(flt):
        return bool(flt(metadata))
    for field, cond in flt.items():
        if field == "$and":
            ok = all(matches_filter(metadata, sub) for sub in cond)
        elif field == "$or":
            ok = any(matches_filter(metadata, sub) for sub in cond)
        elif field == "$not":
            ok = not matches_filter(metadata, cond)
        elif isinstance(cond, dict):
            ok = all(_apply(op, metadata.get(field), arg) for op, arg in cond.items())
        else:
            ok = metadata.get(field) == cond
        if not ok:
            return False
    return True


def _apply(op: str, value: Any, arg: Any) -> bool:
    if op not in _OPS:
        msg = f"Unknown filter operator {op!r}; allowed: {sorted(_OPS)}, $and, $or, $not."
        raise ValueError(msg)
    try:
        return _OPS[op](value, arg)
    except TypeError:
        return False
