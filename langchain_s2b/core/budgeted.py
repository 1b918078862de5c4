"""Retrieval told a budget: the evidence seeds it, hits first, context while it is worth it.

``max_tokens`` is a ceiling, not a target. With it, every mode spends the
budget the same way (:mod:`~langchain_s2b.core.allocate`); the mode only says
how far context may grow around a hit:

- ``window``: ``window_before``/``window_after`` leaves;
- ``parent``: inside the hit's parent (``parent_level``);
- ``multilevel``: up the whole ladder, paragraph, section, document.

One search (and, with ``hybrid``, one BM25 search fused with it) ranks the
children. The *seeds* are the hits that would count as evidence without a
budget (:func:`evidence`): among the ``fetch_k`` best, a score above 0 and
within ``margin`` of the best score. Nothing else seeds the budget, so a
budget larger than what is relevant comes back partly unspent, and a budget
below every hit returns nothing after that one search. Every leaf a seed may
grow into (up to :func:`~langchain_s2b.core.allocate.reach` leaves away) is
fetched in one batched ``mget``; the docstore's nodes are the text returned.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.allocate import LeafId, Run, Seed, allocate, reach
from langchain_s2b.core.budget import MULTILEVEL_BUDGET, TokenCounter
from langchain_s2b.core.hits import Group, Hit, MissingNodeError, result_metadata
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, chunk_of
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.parent import parent_index
from langchain_s2b.core.ranking import Ranked
from langchain_s2b.core.relevance import evidence
from langchain_s2b.core.requests import Fetch, Op, ask

logger = logging.getLogger("langchain_s2b")
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


def one_per_hit(hits: Sequence[Hit], params: QueryParams) -> list[Group]:
    """Pack mode's candidates: every hit (its runs are counted after the allocation)."""
    del params
    return [Group(h.source_key, h.source_id, [], [h], h.level, h.start, h.end) for h in hits]


def pack(
    groups: list[Group], ranking: Ranked, params: QueryParams, on_missing: str
) -> Op[list[Document]]:
    """Seed the budget with the evidence, fetch its neighbourhoods once, allocate."""
    del groups
    budget = params.max_tokens if params.max_tokens is not None else MULTILEVEL_BUDGET
    seeds = evidence(ranking.hits, ranking.relevance, params.margin)
    counter = params.token_counter
    if not any(counter(hit.text) <= budget for hit in seeds):
        return []  # not one hit fits: nothing to fetch
    shape = Shape("multilevel")
    weights = seed_weights(seeds)
    distance = reach(weights)
    keys = leaf_keys(seeds, shape, distance)
    values = yield from ask(Fetch(keys))
    fetched = dict(zip(keys, values, strict=True))
    present = present_seeds(seeds, fetched, on_missing)
    seeds = [seeds[i] for i in present]
    weights = [weights[i] for i in present]
    docs = fill(seeds, weights, shape, fetched, budget, counter)
    for doc in docs:
        doc.metadata["mode"] = "pack"
    return docs if params.count is None else docs[: params.count]


def seed_weights(seeds: Sequence[Hit]) -> list[float]:
    """Each seed's weight: ``1 / (rank + 1)``."""
    return [1.0 / (rank + 1) for rank in range(len(seeds))]


def neighbourhood(hit: Hit, shape: Shape, distance: int | None = None) -> tuple[int, int]:
    """The split ids ``[lo, hi]`` the mode lets ``hit`` reach, at most ``distance`` away.

    A parent's bound is not applied here (see :func:`to_seeds`).
    """
    if distance is None:
        lo, hi = 0, hit.n_splits - 1 if hit.n_splits is not None else sys.maxsize
    else:
        last = hit.n_splits - 1 if hit.n_splits is not None else hit.split_id + distance
        lo, hi = max(0, hit.split_id - distance), min(last, hit.split_id + distance)
    if shape.before is not None:
        lo = max(lo, hit.split_id - shape.before)
    if shape.after is not None:
        hi = min(hi, hit.split_id + shape.after)
    return lo, hi


def leaf_keys(seeds: Sequence[Hit], shape: Shape, distance: int) -> list[str]:
    """Every leaf key any seed may grow into, its own first: one batched fetch."""
    keys: dict[str, None] = {}
    for hit in seeds:
        prefix = level_prefix(hit.source_key, hit.level)
        lo, hi = neighbourhood(hit, shape, distance)
        keys.update((f"{prefix}{i}", None) for i in range(lo, hi + 1))
    return list(keys)


def present_seeds(seeds: Sequence[Hit], fetched: Fetched, on_missing: str) -> list[int]:
    """The positions of the seeds whose own node the docstore holds.

    One it lacks is a :class:`MissingNodeError` (the child index and the
    docstore disagree; the index's copy of the text is never served instead),
    or with ``on_missing="skip"`` left out and counted in the log.
    """
    kept = [i for i, hit in enumerate(seeds) if fetched.get(hit.key) is not None]
    if len(kept) < len(seeds):
        lost = [hit.key for hit in seeds if fetched.get(hit.key) is None]
        if on_missing == "raise":
            msg = (
                f"Child {lost[0]!r} is in the child index but not in the docstore; "
                "run retriever.verify(repair=True) or pass on_missing='skip'."
            )
            raise MissingNodeError(msg)
        logger.warning("Skipped %d hit(s) whose nodes are missing from the store.", len(lost))
    return kept


def fetched_leaves(fetched: Fetched) -> dict[LeafId, Chunk]:
    """The fetched leaves by ``(source key, split id)``."""
    leaves: dict[LeafId, Chunk] = {}
    for doc in fetched.values():
        if doc is not None:
            chunk = chunk_of(doc)
            leaves[(str(doc.metadata["source_key"]), chunk.split_id)] = chunk
    return leaves


def to_seeds(hits: Sequence[Hit], weights: Sequence[float], shape: Shape) -> list[Seed]:
    """Each hit as a :class:`Seed`: its weight and all the mode lets it reach.

    Window: its window; parent: the leaves inside its parent's span;
    multilevel: its whole source.
    """
    seeds = []
    for hit, weight in zip(hits, weights, strict=True):
        lo, hi = neighbourhood(hit, shape)
        span = None
        if shape.inside_parent:
            level = parent_index(hit, shape.parent_level) if hit.ancestors else 0
            if len(hit.ancestors) > level:
                span = (hit.ancestors[level][1], hit.ancestors[level][2])
            else:
                lo = hi = hit.split_id
        seeds.append(Seed(hit.source_key, hit.split_id, lo, hi, weight, span))
    return seeds


def fill(
    hits: Sequence[Hit],
    weights: Sequence[float],
    shape: Shape,
    fetched: Fetched,
    budget: int,
    token_counter: TokenCounter,
    fused: Mapping[str, float] | None = None,
) -> list[Document]:
    """Allocate the budget over the fetched leaves; one document per run, best first."""
    leaves = fetched_leaves(fetched)
    runs = allocate(to_seeds(hits, weights, shape), leaves, budget, token_counter)
    base = {key: doc for key, doc in fetched.items() if doc is not None}
    contexts: dict[str, int] = {}
    docs = []
    for run in runs:
        doc = _document(run, hits, shape.mode, base, fused)
        if shape.mode == "multilevel":
            doc.metadata["context"] = contexts.setdefault(run.source, len(contexts))
        docs.append(doc)
    return docs


def _document(
    run: Run,
    hits: Sequence[Hit],
    mode: str,
    fetched: Mapping[str, Document],
    fused: Mapping[str, float] | None,
) -> Document:
    inside = [hits[rank] for rank in run.seeds]
    first = inside[0]
    prefix = level_prefix(first.source_key, first.level)
    keys = [f"{prefix}{i}" for i in range(run.first, run.last + 1)]
    group = Group(
        first.source_key, first.source_id, keys, inside, first.level, run.start, run.end, "budget"
    )
    meta = result_metadata(group, mode, fetched[first.key].metadata)
    meta.update(split_ids=list(range(run.first, run.last + 1)), tokens=run.tokens)
    if fused is not None:
        meta["fused_score"] = fused[first.key]
        for match in meta["matches"]:
            match["fused_score"] = fused[match["key"]]
    return Document(page_content=run.text, metadata=meta)
