"""How ``s2b query`` shows results: rich panels on a terminal, plain text when piped, JSON.

Each result's header names its scores: the one that ranks it (``fused`` under
hybrid search) and the cosine of its best match. Matched spans (each result's
``matches``, in source coordinates) are highlighted: bold yellow in a terminal,
``**like this**`` in plain text. A long
context (a whole section or document) is shown as ``max_chars`` characters
around its best match; ``--json`` always carries the full text and metadata.
Every piece of document text passes :func:`~langchain_s2b.cli.errors.safe`
(control characters and escape sequences removed) before it is printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from langchain_core.documents import Document

from langchain_s2b.cli.errors import one_line, safe, shown_name
from langchain_s2b.tools import excerpt_bounds, source_label


def result_json(doc: Document, rank: int) -> dict[str, Any]:
    """A result as a JSON-ready dict."""
    meta = doc.metadata
    out = {
        "rank": rank,
        "score": meta.get("score"),
        **{name: meta[name] for name, _ in RANKED_BY if name in meta},
        "source": source_label(meta),
        "text": doc.page_content,
        "metadata": meta,
    }
    if isinstance(meta.get("heading"), str):  # a store indexed with --headers
        out["heading"] = meta["heading"]
    return out


def _spans(doc: Document) -> list[tuple[int, int]]:
    """Matched spans in ``page_content`` coordinates, clipped to it, whitespace trimmed."""
    text = doc.page_content
    base, size = int(doc.metadata.get("start", 0)), len(text)
    out = []
    for match in doc.metadata.get("matches", []):
        lo, hi = max(0, int(match["start"]) - base), min(size, int(match["end"]) - base)
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
        while hi > lo and text[lo].isspace():
            lo += 1
        if hi > lo:
            out.append((lo, hi))
    return sorted(out)


RANKED_BY = (("rerank_score", "rerank"), ("fused_score", "fused"))
"""The score that orders the results when there is one (a reranker's, hybrid search's),
with its label; else the cosine does."""


def scores(meta: dict[str, Any]) -> str:
    """``fused 2.829  cosine 0.630``: the score that ranks first, then the best match's cosine.

    Under hybrid search the results are in the order of their fused score, which
    a cosine alone would not explain (a later result may have a higher cosine).
    """
    shown = [
        f"{label} {meta[name]:.3f}" for name, label in RANKED_BY if _is_number(meta.get(name))
    ][:1]
    if _is_number(meta.get("score")):
        shown.append(f"cosine {meta['score']:.3f}")
    return "  ".join(shown)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _header(doc: Document, rank: int, *, cite: bool = False) -> str:
    meta = doc.metadata
    parts = [f"#{rank}", scores(meta), shown_name(source_label(meta))]
    if isinstance(meta.get("page"), int):
        parts.append(f"page {meta['page']}")
    if isinstance(meta.get("heading"), str) and meta["heading"]:
        parts.append(f"§ {safe(meta['heading'])}")
    if cite and meta.get("source_id") not in (None, source_label(meta)):
        parts.append(f"source {shown_name(str(meta['source_id']))}")
    where = f"{meta.get('mode', '?')}/{meta.get('level', '?')}"
    if "start" in meta:
        where += f", chars {meta['start']}-{meta['end']}"
    if meta.get("escalation"):
        where += f", {meta['escalation']}"
    return one_line("  ".join(p for p in parts if p) + f"  [{where}]")


def segments(doc: Document, max_chars: int) -> list[tuple[str, bool]]:
    """The shown excerpt as ``(safe text, matched)`` pieces, with ``…`` where it is cut."""
    lo, hi = excerpt_bounds(doc, max_chars)
    text, cursor = doc.page_content, lo
    out: list[tuple[str, bool]] = [("… ", False)] if lo > 0 else []
    for start, end in _spans(doc):
        start, end = max(start, cursor), min(end, hi)
        if end > start:
            out += [(safe(text[cursor:start]), False), (safe(text[start:end]), True)]
            cursor = end
    out.append((safe(text[cursor:hi]), False))
    if hi < len(text):
        out.append((" …", False))
    return [(piece, hit) for piece, hit in out if piece]


def plain(doc: Document, rank: int, max_chars: int, *, cite: bool = False) -> str:
    """A result as plain text; matched spans marked ``**like this**``.

    ``cite=True`` also names the result's ``source_id`` in the header (when
    the shown label is another name), the id ``s2b serve``'s ``read`` takes.
    """
    body = "".join(f"**{piece}**" if hit else piece for piece, hit in segments(doc, max_chars))
    return f"{_header(doc, rank, cite=cite)}\n{body.strip()}\n"


def has_rich() -> bool:
    """Whether ``rich`` is installed (the ``cli`` extra)."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def print_rich(docs: Sequence[Document], max_chars: int, out: TextIO) -> None:
    """Results as rich panels with the matched spans in bold yellow."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = Console(file=out)
    for rank, doc in enumerate(docs, 1):
        body = Text()
        for piece, hit in segments(doc, max_chars):
            body.append(piece, style="bold yellow" if hit else None)
        console.print(Panel(body, title=Text(_header(doc, rank)), title_align="left"))
