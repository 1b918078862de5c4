"""Proxies: extra texts that are searched in place of a span of the source (issue 35).

Beside each leaf's own vector, a retriever can hold any number of proxies:
texts that are embedded and lexically indexed and that point at a span of the
source (a sentence, a run of sentences, a paragraph, a section). A proxy is
never returned as text: a hit on it counts as a hit on the leaves of its span,
with the proxy's score, and every mode works from there unchanged.

Three ways to make them, all giving :class:`Proxy` values for one document:
the user's own (``add_documents(docs, proxies=...)``), or a chat model writing
propositions per paragraph (Dense X), a summary per section, or questions per
paragraph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.tree import Node

KINDS = ("proposition", "summary", "question", "user")
"""The kinds of proxy: the three a model writes, and the user's own."""


@dataclass(frozen=True)
class Proxy:
    """One text searched in place of the span ``[start, end)`` of its source's text."""

    text: str
    """What is embedded and lexically indexed (never returned)."""
    start: int
    """Where the span it stands for begins (a character offset in the source text)."""
    end: int
    """Where that span ends."""
    kind: str = "user"
    """One of :data:`KINDS`."""


NodeProxies = Callable[[Document, Node], list[str]]
"""A user's proxies by node: the texts that stand for ``node``'s span of ``document``."""
