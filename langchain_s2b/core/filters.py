"""Metadata filters: the one meaning of ``filter=``, a Mongo-style metadata dict.

``{"year": {"$gte": 2020}, "lang": {"$in": ["en", "fr"]}}``: fields compare
with ``$eq $ne $gt $gte $lt $lte $in $nin`` (a bare value means ``$eq``) and
combine with ``$and $or $not``. Values compare as JSON reads them: a tuple is
an array, equal to the list of the same items (metadata is saved as JSON, so a
tuple comes back a list; a store that filters in its own engine sees an
array). A callable on the metadata dict is accepted too by the in-memory
indexes. :class:`~langchain_s2b.store.vectors.faiss_index.FaissIndex`
evaluates it after its search (FAISS has no metadata);
:func:`~langchain_s2b.store.children.child_base.native_filter` translates it for other
child indexes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable
from typing import Any

Filter = dict[str, Any] | Callable[[dict[str, Any]], bool]


def _equal(value: Any, other: Any) -> bool:
    """``value == other``, a tuple and a list being equal when their items are (JSON arrays)."""
    if isinstance(value, list | tuple) and isinstance(other, list | tuple):
        return len(value) == len(other) and all(map(_equal, value, other))
    return bool(value == other)


def _among(value: Any, options: Any) -> bool:
    if isinstance(value, list | tuple):
        return any(_equal(value, option) for option in options)
    return value in options


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": _equal,
    "$ne": lambda value, other: not _equal(value, other),
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
    "$in": _among,
    "$nin": lambda value, options: not _among(value, options),
}


def check_filter(flt: Any) -> None:
    """Raise ``ValueError`` unless ``flt`` is ``None``, a dict with string keys or a callable."""
    if flt is not None and not isinstance(flt, dict) and not callable(flt):
        msg = (
            "filter must be a metadata dict such as {'year': {'$gte': 2020}} "
            f"(or a callable on the metadata dict); got {type(flt).__name__}."
        )
        raise ValueError(msg)
    key = _non_string_key(flt)
    if key is not _NONE:
        msg = (
            f"A filter's field names and operators are strings (metadata keys are); got {key!r} "
            f"({type(key).__name__}) in {flt!r:.80}."
        )
        raise ValueError(msg)


_NONE = object()


def _non_string_key(flt: Any) -> Any:
    """The first dict key in a filter (at any depth) that is not a string, else ``_NONE``."""
    if isinstance(flt, dict):
        for key, cond in flt.items():
            found = key if not isinstance(key, str) else _non_string_key(cond)
            if found is not _NONE:
                return found
    elif isinstance(flt, list):
        for sub in flt:
            found = _non_string_key(sub)
            if found is not _NONE:
                return found
    return _NONE


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
            ok = _equal(metadata.get(field), cond)
        if not ok:
            return False
    return True


def filter_key(flt: Any) -> Hashable | None:
    """A key that two filters share only when they select the same metadata (for a cache).

    Exact types only (a tuple is not a list, ``1`` not ``True``, ``2020`` not
    ``"2020"``): two filters that differ get two keys. ``None`` for a filter
    holding anything else (a callable, a numpy array): do not cache it.
    """
    kind = type(flt)
    if kind is dict:
        pairs = [(filter_key(k), filter_key(v)) for k, v in flt.items()]
        return None if any(k is None or v is None for k, v in pairs) else ("d", tuple(pairs))
    if kind is list or kind is tuple:
        items = [filter_key(v) for v in flt]
        return None if any(v is None for v in items) else (kind.__name__, tuple(items))
    if kind in (str, int, float, bool, type(None)):
        return (kind.__name__, flt)
    return None


def _apply(op: str, value: Any, arg: Any) -> bool:
    if op not in _OPS:
        msg = f"Unknown filter operator {op!r}; allowed: {sorted(_OPS)}, $and, $or, $not."
        raise ValueError(msg)
    try:
        return _OPS[op](value, arg)
    except TypeError:
        return False
