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


def check_dict_filter(flt: Any) -> None:
    """Raise ``ValueError`` naming the first part of ``flt`` that is not this module's form.

    Checks the whole dict before any search: ``$and``/``$or`` take a list of
    filters, ``$not`` one filter, a field a value or a dict of the operators
    above (``$in``/``$nin`` a list). :func:`matches_filter` evaluates only the
    parts a candidate reaches, so a malformed branch could otherwise go
    unnoticed or fail halfway. (Other child indexes read their own operators:
    this check is for the filters this library evaluates itself.)
    """
    allowed = f"allowed: {', '.join(_OPS)}, $and, $or, $not"
    if not isinstance(flt, dict):
        msg = f"a filter must be an object such as {{'year': {{'$gte': 2020}}}}; got {flt!r}."
        raise ValueError(msg)
    for field, cond in flt.items():
        if field in ("$and", "$or"):
            if not isinstance(cond, list) or not cond:
                msg = f"{field} takes a non-empty list of filters; got {cond!r}."
                raise ValueError(msg)
            for sub in cond:
                check_dict_filter(sub)
        elif field == "$not":
            check_dict_filter(cond)
        elif not isinstance(field, str) or field.startswith("$"):
            msg = f"unknown filter operator {field!r} at the top of a filter; {allowed}."
            raise ValueError(msg)
        elif isinstance(cond, dict):
            for op, arg in cond.items():
                if op not in _OPS:
                    msg = f"unknown filter operator {op!r} for field {field!r}; {allowed}."
                    raise ValueError(msg)
                if op in ("$in", "$nin") and not isinstance(arg, list):
                    msg = f"{op} for field {field!r} takes a list; got {arg!r}."
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
