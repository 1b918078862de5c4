"""Pack mode: the budget packed with the evidence and its neighbours, worth most first.

No fixed shape: where window mode hands back each hit's whole window, pack
mode spends the budget sentence by sentence on what is worth most
(:mod:`~langchain_s2b.core.allocate`): the *seeds* are the evidence
(:mod:`~langchain_s2b.core.relevance`) in rank order, weighing ``1 / (rank +
1)``; a sentence up to ``window_before``/``window_after`` away from a seed is
worth that weight halved per step, summed over the seeds that reach it. So a
small budget goes to the best hits and their next-door sentences before weak
hits, a large one to every hit with its neighbours, and what is worth less
than the weakest hit itself never comes back: a budget larger than what is
relevant comes back partly unspent. Each run of consecutive sentences is a
result (``escalation="budget"``, its ``split_ids``, ``tokens`` and the
``context`` of its document), best seed first; ``k`` counts them.

The mode always has a ceiling: ``max_tokens``, or
:data:`~langchain_s2b.core.budget.MULTILEVEL_BUDGET` when the call names none.
Every leaf a seed may reach is fetched in one batched ``mget``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.allocate import LeafId, Run, Seed, allocate, reach
from langchain_s2b.core.budget import MULTILEVEL_BUDGET
from langchain_s2b.core.hits import (
    Candidate,
    Group,
    Hit,
    MissingNodeError,
    all_read,
    result_metadata,
)
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, WholeLeaf, chunk_of
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.ranking import Ranked
from langchain_s2b.core.relevance import evidence
from langchain_s2b.core.requests import (
    LeafRead,
    Op,
    ReadLeaves,
    ask,
    leaf_metadata,
    read_documents,
)

logger = logging.getLogger("langchain_s2b")
Fetched = Mapping[str, LeafRead | None]


def one_per_hit(hits: Sequence[Candidate], params: QueryParams) -> list[Group]:
    """Pack mode's candidates for the search loop: every hit (its runs count against ``k``)."""
    del params
    return [
        Group(h.source_key, h.source_id, [], [h], h.level, h.start, h.end) for h in all_read(hits)
    ]


def pack(
    groups: list[Group], ranking: Ranked, params: QueryParams, on_missing: str
) -> Op[list[Document]]:
    """Seed the budget with the evidence, fetch what it may reach once, allocate."""
    del groups
    budget = params.max_tokens if params.max_tokens is not None else MULTILEVEL_BUDGET
    seeds = all_read(evidence(ranking.hits, ranking.relevance, params.margin))
    if not any(params.token_counter(hit.text) <= budget for hit in seeds):
        return []  # not one hit fits: nothing to fetch
    weights = seed_weights(seeds)
    keys = leaf_keys(seeds, params.before, params.after, reach(weights))
    values = yield from ask(ReadLeaves(keys))
    fetched = dict(zip(keys, values, strict=True))
    present = present_seeds(seeds, fetched, on_missing)
    seeds = [seeds[i] for i in present]
    weights = [weights[i] for i in present]
    found = [
        Seed(hit.source_key, hit.split_id, *window(hit, params.before, params.after), weight)
        for hit, weight in zip(seeds, weights, strict=True)
    ]
    runs = allocate(found, fetched_leaves(fetched), budget, params.token_counter)[: params.count]
    yield from read_documents(fetched, [seeds[run.seeds[0]].key for run in runs])  # metadata
    base = {key: doc for key, doc in fetched.items() if doc is not None}
    contexts: dict[str, int] = {}
    docs = []
    for run in runs:
        doc = _document(run, seeds, base)
        doc.metadata["context"] = contexts.setdefault(run.source, len(contexts))
        docs.append(doc)
    return docs


def seed_weights(seeds: Sequence[Hit]) -> list[float]:
    """Each seed's weight: ``1 / (rank + 1)``."""
    return [1.0 / (rank + 1) for rank in range(len(seeds))]


def window(hit: Hit, before: int, after: int, distance: int | None = None) -> tuple[int, int]:
    """The split ids ``[lo, hi]`` a seed may reach: its window, at most ``distance`` away."""
    last = hit.split_id + after if hit.n_splits is None else hit.n_splits - 1
    lo, hi = max(0, hit.split_id - before), min(last, hit.split_id + after)
    if distance is not None:
        lo, hi = max(lo, hit.split_id - distance), min(hi, hit.split_id + distance)
    return lo, hi


def leaf_keys(seeds: Sequence[Hit], before: int, after: int, distance: int) -> list[str]:
    """Every leaf key any seed may grow into (and still reach the floor): one fetch."""
    keys: dict[str, None] = {}
    for hit in seeds:
        prefix = level_prefix(hit.source_key, hit.level)
        lo, hi = window(hit, before, after, distance)
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
    """The leaves read by ``(source key, split id)``.

    A leaf read as a chunk (with its metadata or without) is a node of its
    key's source (the store checked that its metadata names it); a document
    names its own.
    """
    leaves: dict[LeafId, Chunk] = {}
    for key, doc in fetched.items():
        if isinstance(doc, Chunk | WholeLeaf):
            chunk = doc if isinstance(doc, Chunk) else doc.chunk
            leaves[(key.partition("/")[0], chunk.split_id)] = chunk
        elif doc is not None:
            chunk = chunk_of(doc)
            leaves[(str(doc.metadata["source_key"]), chunk.split_id)] = chunk
    return leaves


def _document(run: Run, hits: Sequence[Hit], fetched: Mapping[str, LeafRead]) -> Document:
    inside = [hits[rank] for rank in run.seeds]
    first = inside[0]
    prefix = level_prefix(first.source_key, first.level)
    keys = [f"{prefix}{i}" for i in range(run.first, run.last + 1)]
    group = Group(
        first.source_key, first.source_id, keys, inside, first.level, run.start, run.end, "budget"
    )
    meta = result_metadata(group, "pack", leaf_metadata(fetched[first.key]))
    meta.update(split_ids=list(range(run.first, run.last + 1)), tokens=run.tokens)
    return Document(page_content=run.text, metadata=meta)
