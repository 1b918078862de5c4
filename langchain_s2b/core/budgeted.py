"""Retrieval told a budget: seeds from the best hits, each mode's reach, one fetch, allocation.

With ``max_tokens`` every mode fills the budget the same way
(:mod:`~langchain_s2b.core.allocate`); the mode only says how far context may
grow around a hit:

- ``window``: ``window_before``/``window_after`` leaves;
- ``parent``: inside the hit's parent (``parent_level``);
- ``multilevel``: up the whole ladder, paragraph, section, document.

The *seeds* are the best distinct hits, taken until their own text alone
would fill the budget, so a larger budget looks deeper. A leaf further than
``log(seeds) / log(1 / decay)`` leaves from a seed is worth less than the
weakest seed itself, so no neighbourhood reaches further than that, and every
leaf that can be chosen is fetched in one batched ``mget`` before the
allocator counts real tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.allocate import DECAY, LeafId, Run, Seed, allocate
from langchain_s2b.core.hits import Group, Hit, result_metadata
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, chunk_of
from langchain_s2b.core.tokens import TokenCounter

Fetched = Mapping[str, Document | None]


@dataclass(frozen=True)
class Shape:
    """How far one mode lets context grow around a hit."""

    mode: str
    before: int | None = None
    """Window mode: leaves before a hit (``None``: no window limit)."""
    after: int | None = None
    """Window mode: leaves after a hit."""
    parent_level: int | None = None
    """Parent mode: index into a hit's ``ancestors`` of the node it stays inside."""


def seed_hits(
    hits: Sequence[Hit], budget: int, token_counter: TokenCounter
) -> tuple[list[Hit], bool]:
    """The best hits (distinct, in order) until their own text fills ``budget``; filled?"""
    seeds: list[Hit] = []
    used = 0
    for hit in hits:
        if used >= budget:
            break
        seeds.append(hit)
        used += token_counter(hit.text)
    return seeds, used >= budget


def reach_distance(n_seeds: int, decay: float = DECAY) -> int:
    """The farthest a leaf can be from a seed and still outweigh the weakest seed (at least 1).

    A leaf ``d`` steps from the best seed is worth ``decay ** d``; the weakest
    of ``n`` seeds is worth ``1 / n`` on its own.
    """
    if n_seeds <= 1:
        return 1
    return max(1, math.floor(math.log(n_seeds) / math.log(1 / decay)))


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
        if shape.parent_level is not None:
            lo, hi = _inside_parent(hit, shape.parent_level, lo, hi, leaves)
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
