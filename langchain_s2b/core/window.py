"""Window mode: hits seed windows of neighbours, best first; each window merged exactly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, islice
from operator import attrgetter
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.core.hits import (
    Candidate,
    Group,
    Hit,
    MissingNodeError,
    Placed,
    result_metadata,
)
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, Merged, SpanText, WholeLeaf, leaf_chunk, merge_chunks
from langchain_s2b.core.requests import LeafRead, leaf_metadata

_SOURCE = attrgetter("source_key")

Span = tuple[int, int, int, list[int]]
"""``(seed, lo, hi, matches)`` of one window: ``seed`` and ``matches`` index the hits,
``lo`` and ``hi`` are its first and last split id."""


def plan_windows(
    hits: Sequence[Candidate],
    before: int,
    after: int,
    *,
    coalesce: bool = True,
    limit: int | None = None,
) -> list[Group]:
    """Windows seeded by hits (distinct, in rank order), best first; at most ``limit`` of them.

    With ``coalesce`` (the default), windows of one source never share a
    split: a hit inside a better hit's window joins it as a match and widens
    nothing, and a hit outside every window seeds a new window of ``before`` /
    ``after`` neighbours that stops where a better window begins. Windows that
    touch stay separate results, so ``k`` windows come back whenever ``k`` hits
    lie outside each other's windows. A hit scoring 0 or less (it shares
    nothing with the query) seeds a window only when no better window holds it,
    and is never another window's match. A window's span is fixed by its seed: no
    weaker hit ever widens it. Without ``coalesce`` every hit seeds its own
    full window (windows may overlap) and holds only its own match.

    Only the seeds and the matches must have been read (:func:`place_windows`).
    """
    return _windows(hits, _spans(hits, before, after, coalesce, limit))


def place_windows(
    hits: Sequence[Candidate],
    before: int,
    after: int,
    *,
    coalesce: bool = True,
    limit: int | None = None,
) -> Placed:
    """Where :func:`plan_windows` puts its windows, from the hits' keys and scores alone.

    Its positions are every window's seed and matches, so a query reads only
    these (issue 34): a hit outside the first ``limit`` windows is never read.
    Its windows, built from the same hits once read, are :func:`plan_windows`'s.
    """
    spans = _spans(hits, before, after, coalesce, limit)
    positions = [i for seed, _, _, matches in spans for i in (seed, *matches)]
    return Placed(positions, lambda read: _windows(read, spans))


def _windows(hits: Sequence[Candidate], spans: list[Span]) -> list[Group]:
    """The windows of these spans, from the hits (their seeds and matches read)."""
    windows: list[Group] = []
    for seed, lo, hi, matches in spans:
        hit = _read(hits[seed])
        if hit.n_splits is not None:  # the source's last split (spans are planned without it)
            hi = min(hi, hit.n_splits - 1)
        window = _window_group(hit, lo, hi)
        window.hits.extend(_read(hits[i]) for i in matches)
        windows.append(window)
    return windows


def _spans(
    hits: Sequence[Candidate], before: int, after: int, coalesce: bool, limit: int | None
) -> list[Span]:
    """``(seed, lo, hi, matches)`` per window (indices into ``hits``).

    ``hi`` is not held to the source's last split: no hit lies past it, so
    which window holds a hit does not depend on it.
    """
    spans: list[Span] = []
    by_source: dict[str, list[tuple[int, int, int]]] = {}  # per source: (lo, hi, span)
    full = limit is not None and limit <= 0
    for i, hit in enumerate(hits):
        split = hit.split_id
        mine = by_source.get(hit.source_key) if coalesce else None
        if mine:
            home = _home(mine, split)
            if home is not None:
                if hit.score > 0:  # a child that shares nothing with the query is no match
                    spans[home][3].append(i)
                continue
        if full:
            if coalesce:  # no new window: only the matches of those placed are left to find
                _matches(hits, i + 1, by_source, spans)
            break
        lo, hi = max(0, split - before), split + after
        for other_lo, other_hi, _ in mine or ():
            if other_hi < split:
                lo = max(lo, other_hi + 1)
            else:
                hi = min(hi, other_lo - 1)
        if coalesce:
            by_source.setdefault(hit.source_key, []).append((lo, hi, len(spans)))
        spans.append((i, lo, hi, []))
        full = limit is not None and len(spans) >= limit
    return spans


def _matches(
    hits: Sequence[Candidate],
    start: int,
    by_source: dict[str, list[tuple[int, int, int]]],
    spans: list[Span],
) -> None:
    """The placed windows' matches among ``hits[start:]`` (no new window is opened).

    Only a hit of a source that has a window can be one: the others are passed
    over in one C-level scan of their source keys (a hybrid query ranks ~200
    hits, and ``k`` windows hold a few of them).
    """
    mine = map(by_source.__contains__, map(_SOURCE, islice(hits, start, None)))
    for i in compress(range(start, len(hits)), mine):
        hit = hits[i]
        home = _home(by_source[hit.source_key], hit.split_id)
        if home is not None and hit.score > 0:
            spans[home][3].append(i)


def _home(windows: list[tuple[int, int, int]], split: int) -> int | None:
    """The window of one source that holds ``split``, if any."""
    for lo, hi, window in windows:
        if lo <= split <= hi:
            return window
    return None


def _read(candidate: Candidate) -> Hit:
    if not isinstance(candidate, Hit):
        msg = f"The window hit {candidate.key!r} was placed before it was read."
        raise RuntimeError(msg)
    return candidate


def _window_group(hit: Hit, lo: int, hi: int) -> Group:
    prefix = level_prefix(hit.source_key, hit.level)
    keys = [f"{prefix}{i}" for i in range(lo, hi + 1)]
    return Group(
        hit.source_key, hit.source_id, keys, [hit], hit.level, -1, -1, "", {"lo": lo, "hi": hi}
    )


def assemble_windows(group: Group, fetched: Mapping[str, LeafRead | None]) -> list[Document]:
    """One document per contiguous run of a window that holds a hit.

    A neighbour missing from the store ends the window there (the run on the
    far side is kept only if it holds a hit); ``missing`` lists its split ids.
    A hit whose own node is missing is a :class:`MissingNodeError`: the child
    index and the docstore disagree, and the index's copy of the text is never
    served in place of the store's. The first leaf present must have been read
    whole (its metadata is the result's: :func:`first_present`).
    """
    lo = group.extra["lo"]
    docs = [fetched.get(key) for key in group.keys]
    present = [doc for doc in docs if doc is not None]
    if len(present) == len(docs):  # the usual case: one run, every hit in it
        run = [_chunk(doc, split) for split, doc in enumerate(present, start=lo)]
        return [_from_run(group, group.hits, run, leaf_metadata(present[0]), [])]
    matched = {hit.split_id for hit in group.hits}
    runs: list[list[Chunk]] = [[]]
    missing: list[int] = []
    base: dict[str, Any] | None = None
    for split, doc in enumerate(docs, start=lo):
        if doc is None:
            if split in matched:
                key = group.keys[split - lo]
                msg = (
                    f"Child {key!r} is in the child index but not in the docstore; "
                    "run retriever.verify(repair=True) or pass on_missing='skip'."
                )
                raise MissingNodeError(msg)
            missing.append(split)
            runs.append([])
            continue
        if base is None:
            base = leaf_metadata(doc)
        runs[-1].append(_chunk(doc, split))
    out = []
    for run in runs:
        splits = {c.split_id for c in run}
        hits = [h for h in group.hits if h.split_id in splits]
        if hits:
            out.append(_from_run(group, hits, run, base or {}, missing))
    return out


def first_present(group: Group, fetched: Mapping[str, LeafRead | None]) -> str | None:
    """The key of the window's first leaf present: its metadata is the result's."""
    return next((key for key in group.keys if fetched.get(key) is not None), None)


def _chunk(doc: LeafRead, split: int) -> Chunk:
    if isinstance(doc, Chunk | WholeLeaf):  # a node read from a store's columns: its own numbers
        return leaf_chunk(doc, split)
    meta = doc.metadata
    return Chunk(int(meta["start"]), int(meta["end"]), doc.page_content, split)


def window_span(group: Group) -> tuple[str, int, int]:
    """A window's leaves as one run (:class:`~langchain_s2b.core.requests.ReadSpans`)."""
    return level_prefix(group.source_key, group.level), group.extra["lo"], group.extra["hi"]


def span_window(group: Group, span: SpanText) -> Document:
    """The window of a run read as one slice: :func:`assemble_windows` of its leaves.

    Every leaf is present (so every hit is in the one run) and their merge is
    the slice itself, with no gap.
    """
    splits = list(range(group.extra["lo"], group.extra["hi"] + 1))
    merged = Merged(span.text, span.start, span.end)
    return _window_document(group, group.hits, merged, splits, span.metadata, [])


def _from_run(
    group: Group, hits: list[Hit], run: list[Chunk], base: Mapping[str, Any], missing: list[int]
) -> Document:
    """One run of a window's leaves, merged, as a result document."""
    splits = [c.split_id for c in run]
    return _window_document(group, hits, merge_chunks(run), splits, base, missing)


def _window_document(
    group: Group,
    hits: list[Hit],
    merged: Merged,
    splits: list[int],
    base: Mapping[str, Any],
    missing: list[int],
) -> Document:
    """One run of a window as a result document."""
    part = Group(group.source_key, group.source_id, [], hits, group.level, merged.start, merged.end)
    meta = result_metadata(part, "window", base)
    meta["level"] = "window"
    meta["split_ids"] = splits
    meta["missing_split_ids"] = missing
    meta["gaps"] = list(merged.gaps)
    return Document(page_content=merged.text, metadata=meta)
