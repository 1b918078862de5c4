"""One query's ranked hits: the search (dense, and BM25 with ``hybrid``), fused, with relevance.

Every mode ranks the same way, with or without a budget, so a ceiling the
answer does not reach changes nothing. :func:`ranked` runs one search
``depth`` deep and turns it into a :class:`Ranked`: the hits in rank order,
each hit's relevance (:mod:`~langchain_s2b.core.relevance`) and, under hybrid
search, its fused score. The modes' search loop (:mod:`~langchain_s2b.core.retrieval`)
calls it again, twice as deep, until the mode has its ``k`` results, or, with
``k=None`` under a budget, until no deeper hit could still be evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_s2b.core.fusion import LEXICAL_WEIGHT, TOP_N, fuse, z_scores
from langchain_s2b.core.hits import Hit, dedupe_hits
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.relevance import STATS_DEPTH, Scale, cut, scale_of
from langchain_s2b.core.requests import Found, LeafHits, Op, Search, SearchText, Vector, ask


@dataclass(frozen=True)
class Ranked:
    """One query's hits, in rank order, as deep as one search went."""

    hits: list[Hit]
    """Best first: by relevance (the dense order without hybrid search)."""
    relevance: dict[str, float]
    """Each hit's relevance: the z-score of its rank score (the cosine, or under hybrid
    search the fused score) on the scale of the query's first rank scores."""
    fused: dict[str, float] | None
    """Under hybrid search, each hit's fused score (reported as ``fused_score``)."""
    scale: Scale
    """The dense scores' scale."""
    exhausted: bool
    """Whether the search returned every child that passes the filter."""
    last: float | None
    """The best dense score a child left out of the search may have (``None``: exhausted)."""
    bound: float | None = None
    """The best relevance a child the search did not return may have (``None``: none)."""


def first_depth(params: QueryParams) -> int:
    """How deep the first search goes: ``fetch_k``, ``k``, and the scale's depth when it is read."""
    depth = max(params.fetch_k, params.count or 0)
    if needs_scale(params):
        depth = max(depth, STATS_DEPTH)
    return depth


def needs_scale(params: QueryParams) -> bool:
    """Whether relevance is read: hybrid fusion, the evidence of multilevel and pack, ``k=None``."""
    return params.hybrid or params.mode in ("multilevel", "pack") or params.count is None


def ranked(query: str, vector: Vector, params: QueryParams, depth: int) -> Op[Ranked]:
    """Search ``depth`` deep and rank (fused with BM25's best under hybrid search)."""
    found = yield from ask(Search(vector, query, depth, params.filter))
    hits = dedupe_hits(found.hits)
    scores = [hit.score for hit in hits]
    if found.tied is not None:  # the places of a group of equal scores the cut left out
        scores += [found.tied] * (min(depth, STATS_DEPTH) - len(scores))
    scale = scale_of(scores)
    last = None if found.exhausted else _lowest_left_out(hits, found)
    if not params.hybrid:
        relevance = {hit.key: scale.z(hit.score) for hit in hits}
        bound = None if last is None or last <= 0 else scale.z(last)
        return Ranked(hits, relevance, None, scale, found.exhausted, last, bound)
    lexical = yield from ask(SearchText(query, TOP_N, params.filter))
    by_key = {hit.key: hit for hit in hits}
    missing = [key for key, _ in lexical if key not in by_key]
    if missing:
        scored = yield from ask(LeafHits(missing, params.filter, vector))
        by_key.update((key, scored[key]) for key in missing if key in scored)  # BM25's order
    dense_z = {key: scale.z(hit.score) for key, hit in by_key.items()}
    kept = [(key, s) for key, s in lexical if key in by_key]
    order = fuse(dense_z, kept, LEXICAL_WEIGHT)
    fused_scale = scale_of([score for _, score in order])
    relevance = {key: fused_scale.z(score) for key, score in order}
    bound = None
    if last is not None and last > 0:  # BM25's list holds every leaf it ranks: its lowest z
        floor = min(z_scores([s for _, s in kept]), default=0.0)
        bound = fused_scale.z(scale.z(last) + LEXICAL_WEIGHT * floor)
    hits = [by_key[key] for key, _ in order]
    return Ranked(hits, relevance, dict(order), scale, found.exhausted, last, bound)


def _lowest_left_out(hits: Sequence[Hit], found: Found) -> float:
    """The best score a child the search did not return may have."""
    if found.tied is not None:
        return found.tied
    return hits[-1].score if hits else float("inf")


def may_hold_evidence(ranking: Ranked, margin: float) -> bool:
    """Whether a child deeper than this search could still be evidence.

    Such a child's dense score is at most :attr:`Ranked.last`; it must be above
    0, and its relevance (at most :attr:`Ranked.bound`: its dense z-score, plus
    under hybrid search the weighted lowest lexical z, since the BM25 list
    already holds every leaf it ranks) within ``margin`` of the best.
    """
    if ranking.exhausted or ranking.bound is None or not ranking.relevance:
        return False
    return ranking.bound >= cut(ranking.relevance, margin)
