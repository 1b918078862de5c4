"""What ``s2b query`` and ``s2b serve`` share: the retrieval options, their defaults, damage.

Both commands ask the store's retriever with the same options, built here from
the same defaults (the Python API's, read from
:class:`~langchain_s2b.retriever.SmallToBigRetriever`'s fields), and both turn a
missing node into the same one-line message naming ``s2b verify --repair``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langchain_s2b.cli.errors import UserError, damaged_store
from langchain_s2b.core.budget import TokenCounter, approximate_tokens
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.params import DEFAULT_K as DEFAULT_K
from langchain_s2b.evaluation.scoring import whitespace_tokens
from langchain_s2b.retriever import SmallToBigRetriever

TOKEN_COUNTERS: dict[str, TokenCounter] = {
    "approximate": approximate_tokens,
    "words": whitespace_tokens,
}
"""``--token-counter`` choices: the retriever's default, or whitespace-separated words."""
_FIELDS = SmallToBigRetriever.model_fields
DEFAULT_MODE = str(_FIELDS["mode"].default)
DEFAULT_COUNTER = next(
    name for name, count in TOKEN_COUNTERS.items() if count is _FIELDS["token_counter"].default
)


def query_options(
    *,
    mode: str | None = None,
    k: int | None = None,
    window_size: int | None = None,
    max_tokens: int | None = None,
    parent_level: str | None = None,
    token_counter: str = DEFAULT_COUNTER,
    filter: Any = None,
) -> dict[str, Any]:
    """The ``retriever.invoke`` options of one query; ``None`` means the default.

    ``mode`` and ``k`` are always given (their defaults are the Python API's:
    ``k=None`` is :data:`DEFAULT_K` results, or under ``max_tokens`` as many as
    fit); the retriever checks every value and names what is allowed.
    """
    options: dict[str, Any] = {"mode": DEFAULT_MODE if mode is None else mode, "k": k}
    given = {
        "window_size": window_size,
        "max_tokens": max_tokens,
        "parent_level": parent_level,
        "filter": filter,
    }
    options.update((name, value) for name, value in given.items() if value is not None)
    if token_counter != DEFAULT_COUNTER:
        options["token_counter"] = TOKEN_COUNTERS[token_counter]
    return options


def damaged(directory: Path, err: MissingNodeError) -> UserError:
    """A missing node as one line that names the node and the repair."""
    found = re.search(r"'([^']+)'", str(err))
    return damaged_store(
        directory, f"node {found.group(1)!r} is missing" if found else "a node is missing"
    )
