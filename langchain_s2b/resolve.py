"""Pure: child hits -> parents or windows; exact merging by char offsets.

Nothing here touches a store or an index. The retriever searches, hands the
hits to a *plan* (which nodes each result needs), fetches those keys in one
``mget`` and hands them back to *assemble*.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.keys import node_key

LEAF_FIELDS = ("source_id", "source_key", "level", "split_id", "start", "end")


@dataclass(frozen=True)
class Hit:
    """One matched leaf: where it sits and how well it matched."""

    key: str
    source_key: str
    source_id: str
    level: str
    split_id: int
    start: int
    end: int
    score: float
    text: str
    parent_key: str | None = None
    ancestors: tuple[tuple[str, int, int, int], ...] = ()
    """``(key, start, end, n_children)`` of each enclosing node, nearest first."""
    n_splits: int | None = None

    def match(self) -> dict[str, Any]:
        """The citation record of this hit."""
        return {
            "key": self.key,
            "split_id": self.split_id,
            "score": self.score,
            "start": self.start,
            "end": self.end,
        }


def hit_from_child(doc: Document, score: float) -> Hit:
    """Read a child search result's metadata; raise if it lacks our fields."""
    return hit_from_metadata(doc.metadata, doc.page_content, score, doc.id)


def hit_from_metadata(
    meta: Mapping[str, Any], text: str, score: float, name: str | None = None
) -> Hit:
    """Build a hit from leaf metadata; raise if it lacks our fields."""
    try:
        source_key, level, split_id = meta["source_key"], meta["level"], int(meta["split_id"])
        source_id, start, end = meta["source_id"], int(meta["start"]), int(meta["end"])
    except KeyError:
        missing = [field for field in LEAF_FIELDS if field not in meta]
        msg = (
            f"Child {name or text[:40]!r} from the vector store lacks the metadata "
            f"{missing}; was the index built by SmallToBigRetriever.add_documents?"
        )
        raise ValueError(msg) from None
    ancestors = tuple(
        (str(a[0]), int(a[1]), int(a[2]), int(a[3]) if len(a) > 3 else 0)
        for a in meta.get("ancestors", ())
    )
    return Hit(
        f"{source_key}/{level}/{split_id}",  # node_key, inlined: this runs per hit
        source_key,
        source_id,
        level,
        split_id,
        start,
        end,
        float(score),
        text,
        meta.get("parent_id"),
        ancestors,
        meta.get("source_splits"),
    )


def dedupe_hits(hits: Sequence[Hit]) -> list[Hit]:
    """One hit per key (its best score), best first; ties by key (engine-independent)."""
    best: dict[str, Hit] = {}
    for hit in hits:
        if hit.key not in best or hit.score > best[hit.key].score:
            best[hit.key] = hit
    return sorted(best.values(), key=lambda h: (-h.score, h.key))


@dataclass
class Group:
    """One future result: the hits it holds and the node keys it needs."""

    source_key: str
    source_id: str
    keys: list[str]
    hits: list[Hit]
    level: str
    start: int
    end: int
    escalation: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float:
        """A result's score is the best score of its hits (max aggregation)."""
        return max(hit.score for hit in self.hits)


def rank(groups: Sequence[Group]) -> list[Group]:
    """Best score first; ties by first key (engine-independent)."""
    return sorted(groups, key=lambda g: (-g.score, g.keys[0] if g.keys else g.source_key))


# Parent mode -----------------------------------------------------------------


def plan_parents(hits: Sequence[Hit]) -> list[Group]:
    """Group hits by their parent node, best parent first."""
    groups: dict[str, Group] = {}
    for hit in dedupe_hits(hits):
        if hit.parent_key is None or not hit.ancestors:
            msg = f"Child {hit.key!r} has no parent_id/ancestors metadata."
            raise ValueError(msg)
        key, start, end, _ = hit.ancestors[0]
        if key not in groups:
            level = key.rsplit("/", 2)[1]
            groups[key] = Group(hit.source_key, hit.source_id, [key], [], level, start, end)
        groups[key].hits.append(hit)
    return rank(list(groups.values()))


# Window mode -----------------------------------------------------------------


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
    prefix = node_key(first.source_key, first.level, 0)[:-1]  # "<source>/<level>/"
    keys = [f"{prefix}{i}" for i in range(lo, hi + 1)]
    group = Group(first.source_key, first.source_id, keys, hits, first.level, -1, -1)
    group.extra = {"lo": lo, "hi": hi}
    return group


# Merging ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """A piece of source text with its offsets: ``source[start:end] == text``."""

    start: int
    end: int
    text: str
    split_id: int = 0


@dataclass(frozen=True)
class Merged:
    """Chunks merged by offsets; ``gaps`` are char ranges no chunk covered."""

    text: str
    start: int
    end: int
    gaps: tuple[tuple[int, int], ...] = ()


def merge_chunks(chunks: Sequence[Chunk], gap_fill: str = " ") -> Merged:
    """Merge chunks into one text with no duplicated or lost characters.

    Chunks may overlap, contain one another, repeat, or come unsorted. When
    they cover ``[start, end)`` without holes the result is exactly that source
    slice; a hole (a splitter that dropped whitespace) is filled with
    ``gap_fill`` and reported in ``gaps``. Empty chunks cover nothing and are
    ignored (unless every chunk is empty).
    """
    if not chunks:
        msg = "merge_chunks needs at least one chunk."
        raise ValueError(msg)
    ordered = sorted(
        [c for c in chunks if c.end > c.start] or chunks[:1], key=lambda c: (c.start, -c.end)
    )
    cursor = ordered[0].start
    parts: list[str] = []
    gaps: list[tuple[int, int]] = []
    for chunk in ordered:
        if chunk.end <= cursor:
            continue
        if chunk.start > cursor:
            gaps.append((cursor, chunk.start))
            parts.append(gap_fill)
            cursor = chunk.start
        parts.append(chunk.text[cursor - chunk.start :])
        cursor = chunk.end
    return Merged("".join(parts), ordered[0].start, cursor, tuple(gaps))


def chunk_of(doc: Document, split_field: str = "split_id") -> Chunk:
    """A stored node as a :class:`Chunk`."""
    meta = doc.metadata
    start = int(meta.get("start", meta.get("split_idx_start", 0)))
    end = int(meta.get("end", start + len(doc.page_content)))
    return Chunk(start, end, doc.page_content, int(meta.get(split_field, 0)))


# Assembly --------------------------------------------------------------------


NODE_FIELDS = frozenset(
    {"ancestors", "source_splits", "split_id", "split_idx_start", "parent_id", "children"}
)


def result_metadata(group: Group, mode: str, base: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata every returned document carries (the node's own user metadata too)."""
    hits = sorted(group.hits, key=lambda h: h.start)
    meta = {k: v for k, v in base.items() if k not in NODE_FIELDS}
    meta.update(
        score=group.score,
        mode=mode,
        source_id=group.source_id,
        start=group.start,
        end=group.end,
        level=group.level,
        matches=[h.match() for h in hits],
    )
    if group.escalation:
        meta["escalation"] = group.escalation
    return meta


class MissingNodeError(LookupError):
    """A node the index points at is not in the parent store."""


def assemble_parent(group: Group, fetched: Mapping[str, Document | None]) -> Document:
    """The parent document of a parent group, with score and matches."""
    parent = fetched.get(group.keys[0])
    if parent is None:
        msg = (
            f"Parent {group.keys[0]!r} is in the child index but not in the parent store; "
            "run retriever.verify(repair=True) or pass on_missing='skip'."
        )
        raise MissingNodeError(msg)
    meta = result_metadata(group, "parent", parent.metadata)
    return Document(page_content=parent.page_content, metadata=meta, id=group.keys[0])


def assemble_windows(group: Group, fetched: Mapping[str, Document | None]) -> list[Document]:
    """One document per contiguous run of a window that holds a hit.

    A neighbour missing from the store ends the window there (the run on the
    far side is kept only if it holds a hit); ``missing`` lists its split ids.
    """
    by_split = {hit.split_id: hit for hit in group.hits}
    runs: list[list[Chunk]] = [[]]
    missing: list[int] = []
    for key in group.keys:
        split = int(key.rsplit("/", 1)[1])
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
