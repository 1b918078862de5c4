"""Window mode: each hit grown by its neighbours, windows coalesced, merged exactly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, dedupe_hits, rank, result_metadata
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
    """Grow each hit by ``before``/``after`` neighbours; coalesce overlaps.

    Hits are taken best first until ``limit`` windows exist; the weaker hits
    fetched beyond that point are left out, so they never widen a better window.
    """
    windows: list[tuple[list[Hit], int, int]] = []
    for hit in dedupe_hits(hits):
        if limit is not None and len(windows) >= limit:
            break
        last = hit.n_splits - 1 if hit.n_splits is not None else hit.split_id + after
        members, lo, hi = [hit], max(0, hit.split_id - before), min(last, hit.split_id + after)
        if coalesce:
            keep = []
            for other in windows:
                same = other[0][0].source_key == hit.source_key
                if same and other[1] <= hi + 1 and lo <= other[2] + 1:
                    members, lo, hi = other[0] + members, min(lo, other[1]), max(hi, other[2])
                else:
                    keep.append(other)
            windows = keep
        windows.append((members, lo, hi))
    return rank([_window_group(members, lo, hi) for members, lo, hi in windows])


def _window_group(hits: list[Hit], lo: int, hi: int) -> Group:
    first = hits[0]
    prefix = level_prefix(first.source_key, first.level)
    keys = [f"{prefix}{i}" for i in range(lo, hi + 1)]
    group = Group(first.source_key, first.source_id, keys, hits, first.level, -1, -1)
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


def coalesce_windows(docs: Sequence[Document]) -> list[Document]:
    """Merge assembled windows of one source whose char spans overlap.

    :func:`plan_windows` coalesces by split ids, before the fetch; when chunks
    overlap by more than one chunk's stride, windows with disjoint split ranges
    still share text, which only the fetched spans show. A merged window is
    exact (``merge_chunks``) and takes the place, in rank order, of the first
    window it absorbed. Windows with gaps are left as they are.
    """
    out: list[Document] = []
    for doc in docs:
        place = len(out)
        while (i := _overlapping(out, doc)) is not None:
            doc = _join_windows(out.pop(i), doc)
            place = min(place, i)
        out.insert(place, doc)
    return out


def _overlapping(windows: Sequence[Document], doc: Document) -> int | None:
    meta = doc.metadata
    for i, other in enumerate(windows):
        kept = other.metadata
        if (
            kept["source_id"] == meta["source_id"]
            and kept["start"] < meta["end"]
            and meta["start"] < kept["end"]
            and not kept.get("gaps")
            and not meta.get("gaps")
        ):
            return i
    return None


def _join_windows(first: Document, second: Document) -> Document:
    a, b = first.metadata, second.metadata
    merged = merge_chunks(
        [
            Chunk(a["start"], a["end"], first.page_content),
            Chunk(b["start"], b["end"], second.page_content),
        ]
    )
    matches = {m["key"]: m for m in [*a["matches"], *b["matches"]]}
    splits = sorted({*a.get("split_ids", []), *b.get("split_ids", [])})
    missing = sorted(
        {*a.get("missing_split_ids", []), *b.get("missing_split_ids", [])} - set(splits)
    )
    meta = {
        **a,
        "score": max(a["score"], b["score"]),
        "start": merged.start,
        "end": merged.end,
        "matches": sorted(matches.values(), key=lambda m: (m["start"], m["end"])),
        "split_ids": splits,
        "missing_split_ids": missing,
        "gaps": list(merged.gaps),
    }
    return Document(page_content=merged.text, metadata=meta)
