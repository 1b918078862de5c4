"""Model-written contexts: a sentence or two that place a paragraph in its document.

Anthropic's contextual retrieval: a chat model is shown the document and one
piece of it and asked for "a short succinct context to situate this chunk
within the overall document for the purposes of improving search retrieval"
(:data:`PROMPT`, their prompt word for word). The answer joins the leaf's
header in what is embedded and lexically indexed
(:func:`~langchain_s2b.core.headers.embedded_text`), never in the returned text.

**The piece is the leaves' parent** (a paragraph over sentences, a ~1,200-token
parent over ~300-token children; a tree of one level: each leaf). Sentences of
one paragraph stand in the same place of their document, so one context
serves them all; the calls grow with the paragraphs, not the sentences; a
parent is about the size of the ~800-token chunks the recipe was measured on,
while a one- or two-sentence context beside a single sentence would outweigh
it in the embedding. The leaves of a piece share its context.

A document longer than :data:`DOCUMENT_CHARS` is shown as the
:data:`DOCUMENT_CHARS` characters around the piece (:func:`window`).

**Cache key**: the SHA-256 of what the model is shown: the prompt's version,
the model's name, the document's text, the window shown of a long document
(its start and end) and the piece's text (:func:`cache_key`), so an unchanged
document never costs a call, whatever else changed (its metadata, the header
setting, a repair), and two equal pieces of a long document shown in two
windows are two prompts with two contexts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_s2b.core.junk import is_junk
from langchain_s2b.core.tree import Node, Tree

PROMPT = (
    "<document>\n{document}\n</document>\n"
    "Here is the chunk we want to situate within the whole document\n"
    "<chunk>\n{chunk}\n</chunk>\n"
    "Please give a short succinct context to situate this chunk within the overall document "
    "for the purposes of improving search retrieval of the chunk. Answer only with the "
    "succinct context and nothing else."
)
"""Anthropic's contextual-retrieval prompt ("Introducing Contextual Retrieval", 2024)."""
PROMPT_VERSION = "contextual-retrieval-1"
"""Changes when :data:`PROMPT` or what it is shown changes (part of every cache key)."""
DOCUMENT_CHARS = 32_000
"""The most of a document a prompt shows (~8,000 tokens, the recipe's documents)."""
MAX_CONTEXT_CHARS = 1_000
"""A model's answer is kept to this many characters (one or two sentences are asked for)."""


def text_digest(text: str) -> str:
    """SHA-256 of a text (UTF-8), computed in pieces (no copy of a large text)."""
    h = hashlib.sha256()
    for start in range(0, len(text), 1 << 20):
        h.update(text[start : start + (1 << 20)].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def window(length: int, start: int, end: int) -> tuple[int, int]:
    """The span of a document of ``length`` characters that a prompt about ``start:end`` shows.

    The whole document up to :data:`DOCUMENT_CHARS`, else the :data:`DOCUMENT_CHARS`
    characters around the piece's middle (kept inside the document).
    """
    if length <= DOCUMENT_CHARS:
        return 0, length
    middle = (start + end) // 2
    lo = max(0, min(middle - DOCUMENT_CHARS // 2, length - DOCUMENT_CHARS))
    return lo, lo + DOCUMENT_CHARS


def cache_key(
    model: str, document_digest: str, piece: str, shown: tuple[int, int] | None = None
) -> str:
    """The cache key of one piece's context (see the module docstring).

    ``shown``: the window of a long document the prompt shows (``None``: all of it;
    a short document's keys are those it always had).
    """
    return prompt_key("s2b-context", PROMPT_VERSION, model, document_digest, piece, shown)


def prompt_key(
    prefix: str,
    version: str,
    model: str,
    document_digest: str,
    piece: str,
    shown: tuple[int, int] | None = None,
) -> str:
    """``<prefix>/`` and the SHA-256 of what a model is shown.

    That is the prompt's version, the model, the document, the window shown
    of a long one, and the piece (contexts and proxies alike).
    """
    h = hashlib.sha256()
    parts = [version, model, document_digest]
    if shown is not None:
        parts.append(f"window {shown[0]}:{shown[1]}")
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    h.update(piece.encode("utf-8", "surrogatepass"))
    return f"{prefix}/{h.hexdigest()}"


@dataclass(frozen=True)
class Piece:
    """One piece of a document to write a context for."""

    key: str
    """Its cache key (:func:`cache_key`)."""
    source_id: str
    document: str
    """The whole source text (shared, not copied)."""
    start: int
    end: int

    def prompt(self) -> str:
        """The prompt that asks for this piece's context."""
        text = self.document
        lo, hi = window(len(text), self.start, self.end)
        return PROMPT.format(document=text[lo:hi], chunk=text[self.start : self.end])


def pieces(source_id: str, text: str, tree: Tree, model: str) -> tuple[list[Piece], list[int]]:
    """The pieces of one source that get a context, and each leaf's piece (``-1``: none).

    A piece whose leaves are all left unembedded (no letter) gets none.
    """
    leaves = tree.leaves
    owner = [-1] * len(leaves)
    if len(tree.levels) > 2:  # leaves under a level of their own: the leaves' parents
        units: Sequence[Node] = tree.nodes[tree.levels[1]]
        spans = [unit.children or (0, 0) for unit in units]
    else:
        units = leaves
        spans = [(i, i + 1) for i in range(len(leaves))]
    digest = text_digest(text)
    found: list[Piece] = []
    for unit, (first, last) in zip(units, spans, strict=True):
        embedded = [
            i for i in range(first, last) if not is_junk(text[leaves[i].start : leaves[i].end])
        ]
        if not embedded:
            continue
        piece = text[unit.start : unit.end]
        shown = window(len(text), unit.start, unit.end) if len(text) > DOCUMENT_CHARS else None
        for i in embedded:
            owner[i] = len(found)
        key = cache_key(model, digest, piece, shown)
        found.append(Piece(key, source_id, text, unit.start, unit.end))
    return found, owner


def leaf_contexts(
    found: Sequence[Piece], owner: Sequence[int], by_key: Mapping[str, str]
) -> list[str]:
    """Each leaf's context, by split id (``""``: none), from its piece's answer."""
    return [by_key[found[i].key] if i >= 0 else "" for i in owner]
