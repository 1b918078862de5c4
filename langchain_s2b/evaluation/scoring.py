"""Scoring: returned pieces against a question's gold answers and evidence spans.

- **hit**: every character of one gold evidence span lies inside the returned
  spans of the right document; for results without spans, a gold answer
  string occurs in the returned text (case-insensitive).
- **answer**: a gold answer string occurs in the returned text, whatever the spans.
- **evidence recall**: the share of gold evidence characters inside the
  returned spans of the right document.
- **evidence precision**: the share of returned characters that lie inside
  gold evidence (Chroma's token-level precision, "Evaluating Chunking
  Strategies", counted in characters: the default counter is characters / 4).
  Every returned character counts, in whatever document, as often as it is
  returned: it is what the caller pays for.
- **tokens**: the ``token_counter``'s count of the returned texts (default
  :func:`~langchain_s2b.core.budget.approximate_tokens`).

:func:`cut` applies a budget the same way to every retriever: pieces are kept
in rank order while they fit, and the first that does not is cut to the longest
prefix that does. Budgets are counted in a ``token_counter``'s tokens or in
whitespace-separated words (:func:`whitespace_tokens`), which no tokenizer
choice can bend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.budget import TokenCounter, approximate_tokens
from langchain_s2b.evaluation.data import Question, Span


@dataclass(frozen=True)
class Piece:
    """Returned text, with its span in its source document when known."""

    text: str
    doc_id: str | None = None
    start: int | None = None
    end: int | None = None


def pieces(docs: Sequence[Document], doc_id_key: str = "source_id") -> list[Piece]:
    """The retrieved documents as pieces (span known when the metadata has it)."""
    out = []
    for doc in docs:
        meta = doc.metadata
        doc_id = meta.get(doc_id_key)
        if doc_id is not None and "start" in meta and "end" in meta:
            out.append(Piece(doc.page_content, str(doc_id), int(meta["start"]), int(meta["end"])))
        else:
            out.append(Piece(doc.page_content))
    return out


def whitespace_tokens(text: str) -> int:
    """Words separated by whitespace: a budget unit independent of any tokenizer."""
    return len(text.split())


def cut(
    parts: Sequence[Piece], budget: int, token_counter: TokenCounter = approximate_tokens
) -> list[Piece]:
    """Keep pieces in rank order while they fit ``budget``; cut the first that does not.

    Each piece is counted on its own. The cut piece keeps its longest prefix
    that fits (its span shortened to match); nothing after it is kept.
    """
    left = budget
    out = []
    for part in parts:
        cost = token_counter(part.text)
        if cost <= left:
            out.append(part)
            left -= cost
            continue
        size = _longest_prefix(part.text, left, token_counter)
        if size:
            end = None if part.start is None else part.start + size
            out.append(Piece(part.text[:size], part.doc_id, part.start, end))
        break
    return out


def _longest_prefix(text: str, budget: int, token_counter: TokenCounter) -> int:
    """The longest ``n`` with ``token_counter(text[:n]) <= budget`` (counts grow with length)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if token_counter(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _covered(evidence: Span, spans: Sequence[Span]) -> int:
    """Characters of ``evidence`` inside the union of ``spans``."""
    lo, hi = evidence
    total, cursor = 0, lo
    for start, end in sorted(spans):
        start, end = max(start, cursor), min(end, hi)
        if end > start:
            total += end - start
            cursor = end
    return total


@dataclass(frozen=True)
class Score:
    """One question's outcome for one list of returned pieces."""

    hit: bool
    answer: bool
    recall: float | None
    tokens: int
    precision: float | None = None
    """Share of returned characters inside gold evidence (``None``: nothing returned, or a
    piece without a span)."""


def score(
    question: Question, parts: Sequence[Piece], token_counter: TokenCounter = approximate_tokens
) -> Score:
    """Score returned pieces against a question's gold answers and evidence."""
    text = "\n".join(p.text for p in parts).lower()
    answer = any(a.lower() in text for a in question.answers if a)
    tokens = sum(token_counter(p.text) for p in parts)
    if not parts:
        return Score(False, False, 0.0, 0)
    spans = [
        (p.start, p.end)
        for p in parts
        if p.doc_id == question.doc_id and p.start is not None and p.end is not None
    ]
    if any(p.start is None for p in parts) or not question.evidence:
        return Score(answer, answer, None, tokens)
    merged = _union(question.evidence)
    inside = sum(_covered(ev, spans) for ev in merged)
    total = sum(e - s for s, e in merged)
    hit = any(_covered(ev, spans) == ev[1] - ev[0] for ev in question.evidence)
    returned = sum(len(p.text) for p in parts)
    useful = sum(_covered(span, merged) for span in spans)
    precision = useful / returned if returned else None
    return Score(hit, answer, inside / total if total else None, tokens, precision)


def _union(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
