"""The token budget: how tokens are counted, and results fitted without cutting a match."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Offline token estimate: one token per four characters, rounded up.

    This is the usual rule of thumb for English with BPE tokenizers (GPT,
    BERT word pieces land within ~20%); it needs no download.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


def fit_budget(docs: Sequence[Document], max_tokens: int) -> list[Document]:
    """Keep results in rank order while they fit; clip the first that does not.

    The clipped result is centred on its best match and keeps that match
    whole; if even the match does not fit what is left, it is dropped.
    """
    out: list[Document] = []
    left = max_tokens
    for doc in docs:
        cost = estimate_tokens(doc.page_content)
        if cost <= left:
            out.append(doc)
            left -= cost
            continue
        clipped = clip_around_best(doc, left * CHARS_PER_TOKEN)
        if clipped is not None:
            out.append(clipped)
        break
    return out


def clip_around_best(doc: Document, max_chars: int) -> Document | None:
    """The ``max_chars`` of ``doc`` centred on its best match, or ``None``."""
    meta = doc.metadata
    start, end = int(meta["start"]), int(meta["end"])
    matches: list[dict[str, Any]] = list(meta.get("matches", []))
    if not matches:
        return None
    best = max(matches, key=lambda m: m["score"])
    m_start, m_end = max(start, best["start"]), min(end, best["end"])
    if m_end - m_start > max_chars:
        return None
    spare = max_chars - (m_end - m_start)
    lo = max(start, m_start - spare // 2)
    hi = min(end, lo + max_chars)
    lo = max(start, hi - max_chars)
    kept = [m for m in matches if m["start"] >= lo and m["end"] <= hi]
    new_meta = {**meta, "start": lo, "end": hi, "matches": kept, "truncated": True}
    new_meta["escalation"] = "budget-trimmed"
    text = doc.page_content[lo - start : hi - start]
    return Document(page_content=text, metadata=new_meta, id=doc.id)
