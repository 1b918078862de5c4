"""Window mode: hits seed windows of neighbours, best first; each window merged exactly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, dedupe_hits, result_metadata
from langchain_s2b.core.keys import level_prefix, split_id_of
from langchain_s2b.core.merge import Chunk, chunk_of, merge_chunks


def plan_windows(
    hits: Sequence[Hit],
    before: int,
    after: int,
    *,
    coalesce: bool = True,
    limit: int | None = None,
) -> list[Group]:
    """Windows seeded by hits in rank order, best first; at most ``limit`` of them.

    With ``coalesce`` (the default), windows of one source never share a
    split: a hit inside a better hit's window joins it as a match and widens
    nothing, and a hit outside every window seeds a new window of ``before`` /
    ``after`` neighbours that stops where a better window begins. Windows that
    touch stay separate results, so ``k`` windows come back whenever ``k`` hits
    lie outside each other's windows. A window's span is fixed by its seed: no
    weaker hit ever widens it. Without ``coalesce`` every hit seeds its own
    full window (windows may overlap) and holds only its own match.
    """
    windows: list[Group] = []
    for hit in dedupe_hits(hits):
        if coalesce:
            home = next((w for w in windows if _inside(w, hit)), None)
            if home is not None:
                home.hits.append(hit)
                continue
        if limit is not None and len(windows) >= limit:
            if coalesce:
                continue
            break
        last = hit.n_splits - 1 if hit.n_splits is not None else hit.split_id + after
        lo, hi = max(0, hit.split_id - before), min(last, hit.split_id + after)
        for other in windows if coalesce else ():
            if other.source_key != hit.source_key:
                continue
            if other.extra["hi"] < hit.split_id:
                lo = max(lo, other.extra["hi"] + 1)
            else:
                hi = min(hi, other.extra["lo"] - 1)
        windows.append(_window_group(hit, lo, hi))
    return windows


def _inside(window: Group, hit: Hit) -> bool:
    extra = window.extra
    return window.source_key == hit.source_key and extra["lo"] <= hit.split_id <= extra["hi"]


def _window_group(hit: Hit, lo: int, hi: int) -> Group:
    prefix = level_prefix(hit.source_key, hit.level)
    keys = [f"{prefix}{i}" for i in range(lo, hi + 1)]
    group = Group(hit.source_key, hit.source_id, keys, [hit], hit.level, -1, -1)
    group.extra = {"lo": lo, "hi": hi}
    return group


def assemble_windows(group: Group, fetched: Mapping[str, Document | None]) -> list[Document]:
    """One document per contiguous run of a window that holds a hit.

    A neighbour missing from the store ends the window there (the run on the
    far side is kept only if it holds a hit); ``missing`` lists its split ids.
    """
    by_split = {hit.split_id: hit for hit in group.hits}
    runs: list[list[Chunk]] = [[]]
    missing: list[int] = []
    for key in group.keys:
        split = split_id_of(key)
        doc = fetched.get(key)
        if doc is None and split in by_split:
            hit = by_split[split]
            runs[-1].append(Chunk(hit.start, hit.end, hit.text, split))
        elif doc is None:
            missing.append(split)
            runs.append([])
        else:
            runs[-1].append(chunk_of(doc))
    present = [fetched[key] for key in group.keys if fetched.get(key) is not None]
    base = present[0].metadata if present and present[0] is not None else {}
    out = []
    for run in runs:
        splits = {c.split_id for c in run}
        hits = [h for h in group.hits if h.split_id in splits]
        if not hits:
            continue
        merged = merge_chunks(run)
        part = Group(
            group.source_key, group.source_id, [], hits, group.level, merged.start, merged.end
        )
        meta = result_metadata(part, "window", base)
        meta.update(split_ids=sorted(splits), missing_split_ids=missing, gaps=list(merged.gaps))
        out.append(Document(page_content=merged.text, metadata=meta))
    return out
