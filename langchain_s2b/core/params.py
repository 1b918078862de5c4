"""Retrieval parameters: per-call options, validated once, over constructor defaults."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from langchain_core.documents import BaseDocumentCompressor

from langchain_s2b.core.budget import TokenCounter, approximate_tokens

Mode = Literal["parent", "window", "multilevel", "pack"]
MODES: tuple[str, ...] = get_args(Mode)
DEFAULT_K = 4
"""Results per query when ``k`` is ``None`` and no budget is named."""
MARGIN = 4.5
"""Default evidence margin, in standard deviations of the query's own scores."""
CONFIDENCE = 1.0
"""Default margin of the confident evidence, which decides escalations (std devs)."""


@dataclass(frozen=True)
class QueryParams:
    """Everything one retrieval call needs to know."""

    mode: str = "parent"
    k: int | None = None
    fetch_k: int = 16
    filter: Any = None
    window_size: int = 1
    window_before: int | None = None
    window_after: int | None = None
    coalesce: bool = True
    max_tokens: int | None = None
    margin: float = MARGIN
    confidence: float = CONFIDENCE
    merge_threshold: float | None = None
    hybrid: bool = True
    token_counter: TokenCounter = approximate_tokens
    parent_level: str | None = None
    reranker: Any = None
    score_threshold: float | None = None

    @property
    def count(self) -> int | None:
        """The most results to return: ``k``; ``None`` (as many as fit) only under a budget."""
        if self.k is None and self.max_tokens is None:
            return DEFAULT_K
        return self.k

    @property
    def before(self) -> int:
        """Neighbours taken before each hit."""
        return self.window_size if self.window_before is None else self.window_before

    @property
    def after(self) -> int:
        """Neighbours taken after each hit."""
        return self.window_size if self.window_after is None else self.window_after


OVERRIDABLE = frozenset(f.name for f in fields(QueryParams))
_POSITIVE = ("k", "fetch_k", "max_tokens")
_NON_NEGATIVE = ("window_size", "window_before", "window_after", "margin", "confidence")


def check(params: QueryParams) -> QueryParams:
    """Raise ``ValueError`` naming the bad value and what is allowed."""
    if params.mode not in MODES:
        msg = f"mode must be one of {list(MODES)}; got {params.mode!r}."
        raise ValueError(msg)
    for name in (*_POSITIVE, *_NON_NEGATIVE):
        value = getattr(params, name)
        if value is None and name not in ("fetch_k", "window_size", "margin", "confidence"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = f"{name} must be a number; got {value!r}."
            raise ValueError(msg)
        if name in _POSITIVE and value < 1:
            msg = f"{name} must be at least 1; got {value!r}."
            raise ValueError(msg)
        if name in _NON_NEGATIVE and value < 0:
            msg = f"{name} must be 0 or more; got {value!r}."
            raise ValueError(msg)
    for name in ("k", "fetch_k", "window_size", "window_before", "window_after", "max_tokens"):
        value = getattr(params, name)
        if value is not None and not isinstance(value, int):
            msg = f"{name} must be an integer; got {value!r}."
            raise ValueError(msg)
    if not isinstance(params.hybrid, bool):
        msg = f"hybrid must be True or False; got {params.hybrid!r}."
        raise ValueError(msg)
    if not callable(params.token_counter):
        msg = (
            "token_counter must be a callable from text to a token count (for example "
            f"chat_model.get_num_tokens); got {type(params.token_counter).__name__}."
        )
        raise ValueError(msg)
    if params.reranker is not None and not isinstance(params.reranker, BaseDocumentCompressor):
        got = type(params.reranker).__name__
        msg = (
            "reranker must be a LangChain BaseDocumentCompressor (e.g. CrossEncoderReranker, "
            f"FlashrankRerank, CohereRerank) or None; got {got}."
        )
        raise ValueError(msg)
    if params.parent_level is not None and not isinstance(params.parent_level, str):
        got = params.parent_level
        msg = f"parent_level must be a level name such as 'section', or None; got {got!r}."
        raise ValueError(msg)
    floor = params.score_threshold
    if floor is not None and (
        isinstance(floor, bool)
        or not isinstance(floor, numbers.Real)
        or not -1 <= float(floor) <= 1  # NaN fails it too
    ):
        msg = f"score_threshold must be a cosine from -1 to 1, or None (off); got {floor!r}."
        raise ValueError(msg)
    threshold = params.merge_threshold
    if threshold is not None and not 0 <= threshold < 1:
        msg = f"merge_threshold must be in [0, 1) or None; got {threshold!r}."
        raise ValueError(msg)
    return params


def check_query(query: str) -> None:
    """Refuse a query without a word: empty or only whitespace (one-line ``ValueError``).

    LangChain's retrievers leave this open; an empty query would still be
    embedded and answered with whatever lies nearest to nothing.
    """
    if not query.strip():
        msg = (
            f"The query is empty (got {query[:60]!r}); give a question or keywords, "
            "e.g. 'who was Rollo?'."
        )
        raise ValueError(msg)


def with_overrides(base: QueryParams, overrides: Mapping[str, Any]) -> QueryParams:
    """Apply ``invoke(q, **overrides)``; unknown names are an error, not ignored."""
    unknown = sorted(set(overrides) - OVERRIDABLE)
    if unknown:
        msg = f"Unknown retrieval option(s) {unknown}; allowed: {sorted(OVERRIDABLE)}."
        raise ValueError(msg)
    return check(replace(base, **overrides))


class Overrides:
    """:func:`with_overrides` over one base, each call's options checked once.

    A retriever called again and again with the same options (a tool an agent
    calls, an evaluation loop, ``invoke(q, k=4)``) gets the same parameters
    back without checking them again, when every option is a plain value
    (``int``, ``float``, ``str``, ``bool``, ``None``); any other (a filter
    dict, a callable) is checked on every call. At most :data:`KEPT` kept.
    """

    def __init__(self, base: QueryParams) -> None:
        self.base = base
        self._kept: dict[tuple[tuple[str, type, object], ...], QueryParams] = {}

    def apply(self, overrides: Mapping[str, Any]) -> QueryParams:
        """``with_overrides(self.base, overrides)``."""
        key = _plain_key(overrides)
        if key is None:
            return with_overrides(self.base, overrides)
        found = self._kept.get(key)
        if found is None:
            found = with_overrides(self.base, overrides)
            if len(self._kept) >= KEPT:
                self._kept.clear()
            self._kept[key] = found
        return found


KEPT = 64
"""How many sets of per-call options :class:`Overrides` keeps."""
_PLAIN = frozenset({int, float, str, bool, type(None)})


def _plain_key(overrides: Mapping[str, Any]) -> tuple[tuple[str, type, object], ...] | None:
    """The options as a key, each value with its type (``1``, ``1.0``, ``True`` differ)."""
    key = tuple((name, type(value), value) for name, value in overrides.items())
    return key if all(kind in _PLAIN for _, kind, _ in key) else None


def check_tree(params: QueryParams, levels: Sequence[str]) -> QueryParams:
    """Refuse a mode the tree can not serve, in one line that says how to build for it.

    Multilevel mode climbs from the leaves through paragraphs and sections to
    the document: on a tree whose leaves lie right under the document
    (``levels`` holds one name) it would silently jump from a sentence to the
    whole document. (Parent mode there returns the document as the parent, as
    LangChain's ``ParentDocumentRetriever`` does without a parent splitter.)
    """
    if len(levels) >= 2 or params.mode != "multilevel":
        return params
    msg = (
        f"mode='multilevel' needs a level between the leaves and the document; this "
        f"retriever's tree has only {list(levels)}: build it with mode='multilevel' or "
        "'window' (their default tree: sentences in paragraphs in sections) or levels=[...] "
        "with more levels, or ask for mode='window', 'parent' or 'pack'."
    )
    raise ValueError(msg)
