"""What ``s2b query`` and ``s2b serve`` share: the question, the options, their bounds, damage.

Both commands ask the store's retriever with the same options, built here from
the same defaults (the Python API's, read from
:class:`~langchain_s2b.retriever.SmallToBigRetriever`'s fields) and within the
same bounds (``k`` at most :data:`MAX_K`); both cut a question to what the
store's embedding model reads before anything else is done with it
(:func:`cut_question`), and both turn a missing node into the same one-line
message naming ``s2b verify --repair``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError, damaged_store
from langchain_s2b.cli.options import DEFAULT_MODE as DEFAULT_MODE
from langchain_s2b.cli.options import MAX_K as MAX_K
from langchain_s2b.core.budget import TokenCounter, approximate_tokens
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.params import DEFAULT_K as DEFAULT_K
from langchain_s2b.embeddings import query_window
from langchain_s2b.evaluation.scoring import whitespace_tokens
from langchain_s2b.retriever import SmallToBigRetriever

TOKEN_COUNTERS: dict[str, TokenCounter] = {
    "approximate": approximate_tokens,
    "words": whitespace_tokens,
}
"""``--token-counter`` choices: the retriever's default, or whitespace-separated words."""
_FIELDS = SmallToBigRetriever.model_fields
DEFAULT_COUNTER = next(
    name for name, count in TOKEN_COUNTERS.items() if count is _FIELDS["token_counter"].default
)


def cut_question(model: Embeddings, question: str) -> tuple[str, str | None]:
    """What is searched of ``question``: the part ``model`` reads, and a note when it was cut.

    The longest prefix, ending at the end of a word, that fits the model's
    query window (:func:`~langchain_s2b.embeddings.query_window`: 512 word
    pieces for ``local:e5``; 8,192 tokens, counted approximately, for a model
    that does not say its window). The lexical search sees the same text.
    """
    window = query_window(model)
    searched = window.prefix(question)
    if len(searched) == len(question):
        return question, None
    if not searched.strip():
        msg = (
            f"the embedding model reads no word of the question: its window is "
            f"{window.tokens} token(s)"
        )
        raise UserError(msg)
    longer = (
        "the embedding model reads"
        if window.known
        else "s2b searches with a model whose input window it does not know"
    )
    counted = "" if window.exact else ", counted approximately"
    note = (
        f"the query is longer than {longer}: searched its first {len(searched):,} of "
        f"{len(question):,} characters ({window.tokens:,} tokens{counted})"
    )
    return searched, note


def query_options(
    *,
    mode: str | None = None,
    k: int | None = None,
    window_size: int | None = None,
    max_tokens: int | None = None,
    parent_level: str | None = None,
    token_counter: str = DEFAULT_COUNTER,
    filter: Any = None,
    min_score: float | None = None,
) -> dict[str, Any]:
    """The ``retriever.invoke`` options of one query; ``None`` means the default.

    ``mode`` and ``k`` are always given (their defaults are the Python API's:
    ``k=None`` is :data:`DEFAULT_K` results, or under ``max_tokens`` as many as
    fit); ``k`` is refused outside ``1..MAX_K`` here, and the retriever checks
    every value and names what is allowed. ``min_score`` is the retriever's
    ``score_threshold`` (a cosine from -1 to 1; ``None``: off).
    """
    if isinstance(k, int) and not isinstance(k, bool) and not 1 <= k <= MAX_K:
        msg = f"k must be from 1 to {MAX_K}; got {k}"
        raise UserError(msg)
    if min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, int | float)
        or not -1 <= min_score <= 1  # NaN fails it too
    ):
        msg = f"min_score must be a cosine from -1 to 1; got {min_score!r}"
        raise UserError(msg)
    options: dict[str, Any] = {"mode": DEFAULT_MODE if mode is None else mode, "k": k}
    given = {
        "window_size": window_size,
        "max_tokens": max_tokens,
        "parent_level": parent_level,
        "filter": filter,
    }
    options.update((name, value) for name, value in given.items() if value is not None)
    if min_score is not None:
        options["score_threshold"] = float(min_score)
    if token_counter != DEFAULT_COUNTER:
        options["token_counter"] = TOKEN_COUNTERS[token_counter]
    return options


def no_results(min_score: float | None, option: str) -> str:
    """The line an empty answer prints: with a floor (``option`` names it), what it held back."""
    if min_score is None:
        return "no results"
    return (
        f"no results: nothing scored at or above {option} {min_score:g} "
        "(the cosine of a context's best match)"
    )


def damaged(directory: Path, err: MissingNodeError) -> UserError:
    """A missing node as one line that names the node and the repair."""
    found = re.search(r"'([^']+)'", str(err))
    return damaged_store(
        directory, f"node {found.group(1)!r} is missing" if found else "a node is missing"
    )
