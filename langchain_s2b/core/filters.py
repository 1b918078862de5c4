"""Metadata filters: the one meaning of ``filter=``, a Mongo-style metadata dict.

``{"year": {"$gte": 2020}, "lang": {"$in": ["en", "fr"]}}``: fields compare
with ``$eq $ne $gt $gte $lt $lte $in $nin`` (a bare value means ``$eq``) and
combine with ``$and $or $not``. A callable on the metadata dict is accepted too
by the in-memory indexes. :class:`~langchain_s2b.store.faiss_index.FaissIndex`
evaluates it after its search (FAISS has no metadata);
:func:`~langchain_s2b.store.child_index.native_filter` translates it for other
child indexes.
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


def check_filter(flt: Any) -> None:
    """Raise ``ValueError`` unless ``flt`` is ``None``, a dict or a callable."""
    if flt is not None and not isinstance(flt, dict) and not callable(flt):
        msg = (
            "filter must be a metadata dict such as {'year': {'$gte': 2020}} "
            f"(or a callable on the metadata dict); got {type(flt).__name__}."
        )
        raise ValueError(msg)


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
