"""Retrieval told a budget: seeds from the best hits, each mode's reach, one fetch, allocation.

With ``max_tokens`` every mode fills the budget the same way
(:mod:`~langchain_s2b.core.allocate`); the mode only says how far context may
grow around a hit:

- ``window``: ``window_before``/``window_after`` leaves;
- ``parent``: inside the hit's parent (``parent_level``);
- ``multilevel``: up the whole ladder, paragraph, section, document.

The *seeds* are the best distinct hits, taken until their own text alone
would fill the budget (a hit longer than the budget does not count), so a
larger budget looks deeper. A leaf further than
``log(seeds) / log(1 / decay)`` leaves from a seed is worth less than the
weakest seed itself, so no neighbourhood reaches further than that, and every
leaf that can be chosen is fetched in one batched ``mget`` before the
allocator counts real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from langchain_core.documents import Document

from langchain_s2b.core.allocate import DECAY, LeafId, Run, Seed, allocate
from langchain_s2b.core.budget import TokenCounter
from langchain_s2b.core.filters import Filter, matches_filter
from langchain_s2b.core.fusion import LEXICAL_WEIGHT, TOP_N, z_fuse
from langchain_s2b.core.hits import (
    Group,
    Hit,
    dedupe_hits,
    hit_from_child,
    result_metadata,
    with_score,
)
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, chunk_of
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.parent import parent_index
from langchain_s2b.core.requests import (
    EmbedQuery,
    Fetch,
    LeafHits,
    Op,
    Search,
    SearchText,
    Vector,
    ask,
)

Fetched = Mapping[str, Document | None]


@dataclass(frozen=True)
class Shape:
    """How far one mode lets context grow around a hit."""

    mode: str
    before: int | None = None
    """Window mode: leaves before a hit (``None``: no window limit)."""
    after: int | None = None
    """Window mode: leaves after a hit."""
    inside_parent: bool = False
    """Parent mode: stay inside the hit's parent."""
    parent_level: str | None = None
    """The parent's level (``None``: the hit's nearest ancestor)."""

    @classmethod
    def of(cls, params: QueryParams) -> Shape:
        """The shape of ``params.mode``."""
        if params.mode == "window":
            return cls("window", params.before, params.after)
        if params.mode == "parent":
            return cls("parent", inside_parent=True, parent_level=params.parent_level)
        return cls(params.mode)


def retrieve_within(
    query: str, params: QueryParams, budget: int, vector: Vector | None = None
) -> Op[list[Document]]:
    """Search until the best hits fill ``budget``, fetch their neighbourhoods once, allocate.

    ``vector``: the query's vector when the caller has embedded it already.
    """
    counter = params.token_counter
    if vector is None:
        vector = yield from ask(EmbedQuery(query))
    fetch = max(params.fetch_k, params.k, TOP_N if params.hybrid else 0)
    while True:
        found, exhausted = yield from ask(Search(vector, query, fetch, params.filter))
        hits = dedupe_hits(found)
        if params.hybrid:
            hits = yield from fused(hits, query, fetch, params.filter)
        seeds, filled = seed_hits(hits, budget, counter)
        if filled or exhausted:
            break
        fetch *= 2
    shape = Shape.of(params)
    distance = reach_distance(len(seeds))
    keys = leaf_keys(seeds, shape, distance)
    values: list[Document | None] = []
    if keys:
        values = yield from ask(Fetch(keys))
    return fill(seeds, shape, distance, dict(zip(keys, values, strict=True)), budget, counter)


def fused(hits: Sequence[Hit], query: str, n: int, flt: object) -> Op[list[Hit]]:
    """Dense hits fused with the ``n`` best lexical ones (z-scores); score = the fused score.

    Leaves only the lexical list found must pass the same filter; they are read
    from the child index's own records (FAISS), else from the docstore (one fetch).
    """
    lexical = yield from ask(SearchText(query, n))
    by_key = {hit.key: hit for hit in hits}
    missing = [key for key, _ in lexical if key not in by_key]
    if missing:
        held = yield from ask(LeafHits(missing, flt))
        if held is not None:
            by_key.update((key, hit) for key, hit in held.items() if hit is not None)
            missing = [key for key in missing if key not in held]
    if missing:
        docs = yield from ask(Fetch(missing))
        for key, doc in zip(missing, docs, strict=True):
            wanted = doc is not None and "source_key" in doc.metadata
            if doc is not None and wanted and matches_filter(doc.metadata, cast("Filter", flt)):
                by_key[key] = hit_from_child(doc, 0.0)
    ranked = z_fuse(
        [(hit.key, hit.score) for hit in hits],
        [(key, score) for key, score in lexical if key in by_key],
        LEXICAL_WEIGHT,
    )
    return [with_score(by_key[key], score) for key, score in ranked]


def seed_hits(
    hits: Sequence[Hit], budget: int, token_counter: TokenCounter
) -> tuple[list[Hit], bool]:
    """The best hits, in order, until those that fit the budget alone fill it; filled?

    A hit longer than the whole budget can never be returned: it is a seed (its
    neighbours may be worth taking) but does not count towards filling.
    """
    seeds: list[Hit] = []
    used = 0
    for hit in hits:
        if used >= budget:
            break
        seeds.append(hit)
        cost = token_counter(hit.text)
        if cost <= budget:
            used += cost
    return seeds, used >= budget


def reach_distance(n_seeds: int, decay: float = DECAY) -> int:
    """The farthest a leaf can be from a seed and still outweigh the weakest seed (at least 1).

    A leaf ``d`` steps from the best seed is worth ``decay ** d``; the weakest
    of ``n`` seeds is worth ``1 / n`` on its own: ``d`` is the largest integer
    with ``(1 / decay) ** d <= n``.
    """
    distance = 1
    while (1 / decay) ** (distance + 1) <= n_seeds:
        distance += 1
    return distance


def neighbourhood(hit: Hit, shape: Shape, distance: int) -> tuple[int, int]:
    """The split ids ``[lo, hi]`` around ``hit`` to fetch (before a parent bound applies)."""
    last = hit.n_splits - 1 if hit.n_splits is not None else hit.split_id + distance
    lo, hi = max(0, hit.split_id - distance), min(last, hit.split_id + distance)
    if shape.before is not None:
        lo = max(lo, hit.split_id - shape.before)
    if shape.after is not None:
        hi = min(hi, hit.split_id + shape.after)
    return lo, hi


def leaf_keys(seeds: Sequence[Hit], shape: Shape, distance: int) -> list[str]:
    """Every leaf key any seed may grow into: one batched fetch."""
    keys: dict[str, None] = {}
    for hit in seeds:
        prefix = level_prefix(hit.source_key, hit.level)
        lo, hi = neighbourhood(hit, shape, distance)
        keys.update((f"{prefix}{i}", None) for i in range(lo, hi + 1))
    return list(keys)


def fetched_leaves(seeds: Sequence[Hit], fetched: Fetched) -> dict[LeafId, Chunk]:
    """The fetched leaves by ``(source key, split id)``; a seed's own leaf from its hit."""
    leaves: dict[LeafId, Chunk] = {}
    for doc in fetched.values():
        if doc is not None:
            chunk = chunk_of(doc)
            leaves[(str(doc.metadata["source_key"]), chunk.split_id)] = chunk
    for hit in seeds:
        leaves.setdefault(
            (hit.source_key, hit.split_id), Chunk(hit.start, hit.end, hit.text, hit.split_id)
        )
    return leaves


def to_seeds(
    hits: Sequence[Hit], shape: Shape, distance: int, leaves: Mapping[LeafId, Chunk]
) -> list[Seed]:
    """Each hit as a :class:`Seed`: its neighbourhood, and in parent mode its parent's span."""
    seeds = []
    for hit in hits:
        lo, hi = neighbourhood(hit, shape, distance)
        if shape.inside_parent:
            level = parent_index(hit, shape.parent_level) if hit.ancestors else 0
            lo, hi = _inside_parent(hit, level, lo, hi, leaves)
        seeds.append(Seed(hit.source_key, hit.split_id, lo, hi))
    return seeds


def _inside_parent(
    hit: Hit, level: int, lo: int, hi: int, leaves: Mapping[LeafId, Chunk]
) -> tuple[int, int]:
    if len(hit.ancestors) <= level:
        return hit.split_id, hit.split_id
    _, start, end, _ = hit.ancestors[level]

    def inside(split: int) -> bool:
        leaf = leaves.get((hit.source_key, split))
        return leaf is not None and start <= leaf.start and leaf.end <= end

    first, last = hit.split_id, hit.split_id
    while first - 1 >= lo and inside(first - 1):
        first -= 1
    while last + 1 <= hi and inside(last + 1):
        last += 1
    return first, last


def fill(
    hits: Sequence[Hit],
    shape: Shape,
    distance: int,
    fetched: Fetched,
    budget: int,
    token_counter: TokenCounter,
) -> list[Document]:
    """Allocate the budget over the fetched leaves; one document per run, best first."""
    leaves = fetched_leaves(hits, fetched)
    seeds = to_seeds(hits, shape, distance, leaves)
    runs = allocate(seeds, leaves, budget, token_counter, max_distance=distance)
    base = {key: doc for key, doc in fetched.items() if doc is not None}
    return [_document(run, hits, shape.mode, base) for run in runs]


def _document(
    run: Run, hits: Sequence[Hit], mode: str, fetched: Mapping[str, Document]
) -> Document:
    inside = [hits[rank] for rank in run.seeds]
    first = inside[0]
    prefix = level_prefix(first.source_key, first.level)
    keys = [f"{prefix}{i}" for i in range(run.first, run.last + 1)]
    group = Group(
        first.source_key, first.source_id, keys, inside, first.level, run.start, run.end, "budget"
    )
    present = next((fetched[key] for key in keys if key in fetched), None)
    meta = result_metadata(group, mode, present.metadata if present is not None else {})
    meta.update(split_ids=list(range(run.first, run.last + 1)), tokens=run.tokens)
    return Document(page_content=run.text, metadata=meta)
