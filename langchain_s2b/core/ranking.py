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

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache, cached_property, partial
from itertools import compress, count
from operator import attrgetter, itemgetter
from typing import cast

import numpy as np
from langchain_core.documents import Document

from langchain_s2b.core.fusion import LEXICAL_WEIGHT, TOP_N, fuse_at, z_scores
from langchain_s2b.core.hits import (
    Candidate,
    Hit,
    Scored,
    all_read,
    dedupe_hits,
    unread,
    with_read,
    with_score,
)
from langchain_s2b.core.keys import PROXY_MARK
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.proxy_spans import expand, expand_lexical
from langchain_s2b.core.relevance import STATS_DEPTH, Scale, cut, scale_of
from langchain_s2b.core.requests import (
    Found,
    LeafHits,
    Op,
    ReadHits,
    Rerank,
    Search,
    SearchText,
    TextHits,
    Vector,
    ask,
)


@dataclass(frozen=True)
class Ranked:
    """One query's hits, in rank order, as deep as one search went."""

    hits: list[Candidate]
    """Best first: by relevance (the dense order without hybrid search). A candidate is
    read (a :class:`~langchain_s2b.core.hits.Hit`) once a mode places it (:func:`read`)."""
    relevance_of: dict[str, float] | Callable[[], dict[str, float]]
    """:attr:`relevance`, or how to make it when first read (issue 34: it covers every one
    of ~200 hits, and a mode with ``k`` results and no budget never reads it)."""
    fused: dict[str, float] | None
    """Under hybrid search, each hit's fused score (reported as ``fused_score``)."""
    scale: Scale
    """The dense scores' scale."""
    exhausted: bool
    """Whether the search returned every child that passes the filter."""
    last: float | None
    """The best dense score a child left out of the search may have (``None``: exhausted)."""
    bound_of: float | Callable[[], float | None] | None = None
    """:attr:`bound`, or how to make it when first read (under hybrid search it needs the
    fused scores' scale; a mode with ``k`` results and no budget never reads it)."""
    reranked: dict[str, float] | None = None
    """With a reranker, each hit's ``rerank_score`` (the hits are those it kept, its order)."""
    query: str = ""
    """The query's text (parent mode's fine cuts read its words)."""

    @cached_property
    def relevance(self) -> dict[str, float]:
        """Each hit's relevance, made once.

        The z-score of its rank score (the cosine, or under hybrid search the fused
        score) on the scale of the query's first rank scores.
        """
        made = self.relevance_of
        return made() if callable(made) else made

    @cached_property
    def bound(self) -> float | None:
        """The best relevance a child the search did not return may have (``None``: none)."""
        made = self.bound_of
        return made() if callable(made) else made


def first_depth(params: QueryParams) -> int:
    """How deep the first search goes: ``fetch_k``, ``k``, and the scale's depth when it is read."""
    depth = max(params.fetch_k, params.count or 0)
    if needs_scale(params):
        depth = max(depth, STATS_DEPTH)
    return depth


def needs_scale(params: QueryParams) -> bool:
    """Whether relevance is read: hybrid fusion, the evidence of multilevel and pack, ``k=None``."""
    return params.hybrid or params.mode in ("multilevel", "pack") or params.count is None


def ranked(
    query: str, vector: Vector, params: QueryParams, depth: int, rerank: int | None = None
) -> Op[Ranked]:
    """Search ``depth`` deep and rank.

    Fused with BM25's best under hybrid search; with a reranker, its order of
    the first ``rerank`` (default ``fetch_k``) children.
    """
    ranking = yield from _searched(query, vector, params, depth)
    if params.score_threshold is not None:
        ranking = floored(ranking, params.score_threshold)
    if params.reranker is None:
        return ranking
    return (yield from _reranked(query, ranking, params, rerank or params.fetch_k))


def _searched(query: str, vector: Vector, params: QueryParams, depth: int) -> Op[Ranked]:
    """One search, ranked; a proxy's hit counts as a hit on each leaf it covers.

    The query's scale is read from the scores as searched, before proxies are
    expanded (:func:`~langchain_s2b.core.proxy_spans.expand`), so a proxy
    covering many leaves does not weigh more in it than a leaf.
    """
    lexical_n = TOP_N if params.hybrid else 0
    found = yield from ask(Search(vector, query, depth, params.filter, lexical_n))
    searched = dedupe_hits(found.hits)
    scores = list(map(_SCORE, searched))
    if found.tied is not None:  # the places of a group of equal scores the cut left out
        scores += [found.tied] * (min(depth, STATS_DEPTH) - len(scores))
    scale = scale_of(scores)
    last = None if found.exhausted else _lowest_left_out(searched, found)
    keys = list(map(_KEY, searched))
    marked = PROXY_MARK in "\0".join(keys)  # a proxy's key among them (is_proxy_key), one scan
    proxied = marked and any(isinstance(c, Hit) and c.covers is not None for c in searched)
    hits = dedupe_hits(expand(searched)) if proxied else searched
    if not params.hybrid:

        def dense_relevance() -> dict[str, float]:
            return dict(zip([h.key for h in hits], scale.zs(h.score for h in hits), strict=True))

        bound = None if last is None or last <= 0 else scale.z(last)
        return Ranked(hits, dense_relevance, None, scale, found.exhausted, last, bound, query=query)
    text = found.joined  # BM25's answer, when it came with the search
    if text is not None and not marked and _whole(text):  # the usual answer: no proxy, none gone
        union: list[Candidate] = [*hits, *cast("Iterable[Candidate]", text.scored.values())]
        place = dict(zip(map(_KEY, union), count()))
        at = list(map(place.__getitem__, map(_KEY, text.hits)))
        lexical_z = z_scores(list(map(_SECOND, text.hits)))
        return _fused_ranking(query, found, scale, last, union, lexical_z, at)
    by_key = {hit.key: hit for hit in hits} if proxied else dict(zip(keys, hits, strict=True))
    if text is None:
        text = yield from ask(SearchText(query, TOP_N, params.filter, vector, frozenset(by_key)))
    lexical = text.hits
    proxies = {hit.key: hit for hit in searched if PROXY_MARK in hit.key} if marked else {}
    missing = []
    if PROXY_MARK in "\0".join(map(_KEY, lexical)):  # BM25 found a proxy
        missing = [key for key, _ in lexical if PROXY_MARK in key and key not in proxies]
    if missing:  # BM25's proxies the dense search did not return: their covers, dense scores
        scored = yield from ask(LeafHits(missing, params.filter, vector))
        more = [scored[key] for key in missing if key in scored]
        proxies.update((hit.key, hit) for hit in more)
        by_key = {hit.key: hit for hit in dedupe_hits(expand([*hits, *more]))}
    if proxies or missing:
        lexical = expand_lexical(lexical, proxies)
    missing = [key for key, _ in lexical if key not in by_key]
    if missing:  # scored with BM25's list, but a proxy's covers
        done = text.scored
        rest = [key for key in missing if key not in done]
        if rest:
            scored = yield from ask(LeafHits(rest, params.filter, vector))
            got = [done[key] if key in done else scored.get(key) for key in missing]
        else:  # the usual answer: SearchText scored each one (None: gone, filtered out)
            got = list(map(done.__getitem__, missing))
        by_key.update(filter(_SECOND, zip(missing, got, strict=True)))  # BM25's order
    place = dict(zip(by_key, count()))
    kept = list(compress(lexical, map(place.__contains__, map(_KEY, lexical))))
    at = list(map(place.__getitem__, map(_KEY, kept)))
    lexical_z = z_scores(list(map(_SECOND, kept)))
    return _fused_ranking(query, found, scale, last, list(by_key.values()), lexical_z, at)


def _whole(text: TextHits) -> bool:
    """Whether BM25's list holds no proxy and each of its leaves outside the search is scored.

    Then the leaves the search did not return are exactly :attr:`TextHits.scored`, in
    BM25's order.
    """
    return PROXY_MARK not in "\0".join(map(_KEY, text.hits)) and None not in text.scored.values()


def _fused_ranking(
    query: str,
    found: Found,
    scale: Scale,
    last: float | None,
    union: list[Candidate],
    lexical_z: list[float],
    at: list[int],
) -> Ranked:
    """The hybrid ranking of ``union`` (the dense hits, then BM25's others, in its order).

    ``lexical_z``: the z-scores of BM25's list, ``at``: where each of its
    leaves sits in ``union`` (a leaf it did not rank gets its lowest).
    """
    dense = np.fromiter(map(_SCORE, union), np.float64, len(union))
    order, fused = fuse_at(scale.z_array(dense), lexical_z, at, LEXICAL_WEIGHT)
    hits = [union[i] for i in order]
    ordered = list(map(_KEY, hits))
    fused_scale = cache(partial(scale_of, fused))  # read by the relevance and the bound only

    def fused_relevance() -> dict[str, float]:
        zs = fused_scale().z_array(np.array(fused)).tolist()
        return dict(zip(ordered, zs, strict=True))

    def bound() -> float | None:
        if last is None or last <= 0:
            return None
        floor = min(lexical_z, default=0.0)  # BM25's list holds every leaf it ranks: its lowest z
        return fused_scale().z(scale.z(last) + LEXICAL_WEIGHT * floor)

    by_fused = dict(zip(ordered, fused, strict=True))
    return Ranked(hits, fused_relevance, by_fused, scale, found.exhausted, last, bound, query=query)


_SCORE = attrgetter("score")
_KEY = itemgetter(0)
"""A hit's key (a :class:`Hit`'s and a :class:`Scored`'s first field), and a pair's."""
_SECOND = itemgetter(1)
"""A ``(key, score)`` pair's score, and a ``(key, hit)`` pair's hit."""


def read(ranking: Ranked, keys: Sequence[str] | None = None) -> Op[Ranked]:
    """The ranking with these candidates read as hits (``None``: every one).

    One :class:`~langchain_s2b.core.requests.ReadHits` for the unread ones; a
    child gone since the search is left out of the ranking.
    """
    wanted = unread(ranking.hits)
    if keys is not None:
        asked = set(keys)
        wanted = [key for key in wanted if key in asked]
    if not wanted:
        return ranking
    got = yield from ask(ReadHits(wanted))
    hits = with_read(ranking.hits, set(wanted), got)
    if len(hits) == len(ranking.hits):
        return replace(ranking, hits=hits)
    return _only(ranking, hits)


def read_at(ranking: Ranked, positions: Sequence[int]) -> Op[Ranked]:
    """:func:`read` of the candidates at these places in the ranking (a mode places them).

    The other candidates are not looked at: a query places a few of ~200.
    """
    hits = ranking.hits
    wanted = [c.key for c in map(hits.__getitem__, positions) if isinstance(c, Scored)]
    if not wanted:
        return ranking
    got = yield from ask(ReadHits(wanted))
    if not all(key in got for key in wanted):  # gone since the search: they leave the ranking
        return _only(ranking, with_read(hits, set(wanted), got))
    out = list(hits)
    for i in positions:
        c = out[i]
        if isinstance(c, Scored):
            hit = with_score(got[c.key], c.score)
            out[i] = hit if c.proxy is None else hit._replace(proxy=c.proxy)
    return replace(ranking, hits=out)


def _only(ranking: Ranked, hits: list[Candidate]) -> Ranked:
    """The ranking of these of its hits (the others are gone)."""
    kept = {hit.key for hit in hits}
    fused, reranked = ranking.fused, ranking.reranked
    return replace(
        ranking,
        hits=hits,
        relevance_of={key: z for key, z in ranking.relevance.items() if key in kept},
        fused=None if fused is None else {key: s for key, s in fused.items() if key in kept},
        reranked=None if reranked is None else {k: s for k, s in reranked.items() if k in kept},
    )


def floored(ranking: Ranked, floor: float) -> Ranked:
    """The hits whose ``score`` (the cosine) is at least ``floor``; the others are gone.

    Dropped before the modes group them (no result, match, evidence or budget is
    spent on them) and before a reranker sees them; the query's scale stays the
    one measured on all its scores, so a kept hit's relevance does not change.
    When the best score a child left out of the search may have is below the
    floor, no deeper search can add a hit: the search is exhausted.
    """
    hits = [hit for hit in ranking.hits if hit.score >= floor]
    kept = {hit.key for hit in hits}
    fused = ranking.fused
    done = ranking.last is not None and ranking.last < floor
    return replace(
        ranking,
        hits=hits,
        relevance_of={key: z for key, z in ranking.relevance.items() if key in kept},
        fused=None if fused is None else {key: s for key, s in fused.items() if key in kept},
        exhausted=ranking.exhausted or done,
        last=None if done else ranking.last,
        bound_of=None if done else ranking.bound,
    )


def _lowest_left_out(hits: Sequence[Candidate], found: Found) -> float:
    """The best score a child the search did not return may have."""
    if found.tied is not None:
        return found.tied
    return hits[-1].score if hits else float("inf")


def may_hold_evidence(ranking: Ranked, margin: float) -> bool:
    """Whether a child deeper than this search could still be evidence.

    Such a child's dense score is at most :attr:`Ranked.last`; it must be above
    0, and its relevance (at most :attr:`Ranked.bound`: its dense z-score, plus
    under hybrid search the weighted lowest lexical z, since the BM25 list
    already holds every leaf it ranks) within ``margin`` of the best, itself
    included: with no hit at all (a group of equal scores wider than the
    search left out whole), the best child left out is the best there is.
    """
    if ranking.exhausted or ranking.bound is None:
        return False
    return not ranking.relevance or ranking.bound >= cut(ranking.relevance, margin)


class RerankerError(ValueError):
    """A reranker failed, returned documents it was not given, or dropped them all."""


def _given_score(doc: Document, key: str, name: str) -> float | None:
    """A document's ``relevance_score``: any real number (numpy's too), finite; else ``None``.

    A NaN or an infinity is refused: the relevance is the z-score of the scores,
    which neither has (one infinity makes every z-score NaN).
    """
    given = doc.metadata.get("relevance_score")
    if not isinstance(given, numbers.Real) or isinstance(given, bool):
        return None
    score = float(given)
    if not math.isfinite(score):
        msg = (
            f"The reranker {name} gave relevance_score {score!r} to child {key!r}; "
            "it must be a finite number: scores are compared on their z-scores."
        )
        raise RerankerError(msg)
    return score


def _reranked(query: str, ranking: Ranked, params: QueryParams, n: int) -> Op[Ranked]:
    """The first ``n`` hits as the reranker orders them (those it drops are gone).

    Each hit goes to it as a ``Document`` of the child's text with its key as ``id``
    (and in ``metadata["key"]``). Its ``relevance_score`` metadata, where it gives one
    for every document (any real number, numpy's too; a NaN or an infinity is an error),
    is the ``rerank_score``; else the place it gave: ``(n - p) / n``.
    The relevance is then the z-score of those scores; no deeper child is evidence.
    A reranker that drops children has judged the rest: no deeper search follows.
    """
    while unread(ranking.hits[:n]):  # the reranker reads their text
        ranking = yield from read(ranking, unread(ranking.hits[:n]))
    top = all_read(ranking.hits[:n])
    if not top:
        return ranking
    reranker = params.reranker
    sent = [
        Document(
            page_content=hit.text,
            metadata={"key": hit.key, "source_id": hit.source_id, "score": hit.score},
            id=hit.key,
        )
        for hit in top
    ]
    name = type(reranker).__name__
    try:
        answer = yield from ask(Rerank(reranker, query, sent))
    except Exception as err:  # any failure of a user's reranker: one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        msg = f"The reranker {name} failed on {len(sent)} children: {type(err).__name__}: {first}"
        raise RerankerError(msg[:400]) from None
    by_key = {hit.key: hit for hit in top}
    order: list[tuple[Hit, float | None]] = []
    for doc in answer:
        key = doc.id if doc.id in by_key else doc.metadata.get("key")
        if key not in by_key:
            msg = (
                f"The reranker {name} returned a document it was not given "
                f"(id {doc.id!r}, text {doc.page_content[:40]!r}); it must return some of the "
                f"{len(sent)} children it got, reordered."
            )
            raise RerankerError(msg)
        if all(key != hit.key for hit, _ in order):
            order.append((by_key[key], _given_score(doc, key, name)))
    if not order:
        msg = f"The reranker {name} dropped all {len(sent)} children it was given."
        raise RerankerError(msg)
    if all(score is not None for _, score in order):
        scores = {hit.key: float(score) for hit, score in order if score is not None}
    else:
        scores = {hit.key: (len(order) - p) / len(order) for p, (hit, _) in enumerate(order)}
    hits: list[Candidate] = [hit for hit, _ in order]
    scale = scale_of([scores[hit.key] for hit in hits])
    relevance = {hit.key: scale.z(scores[hit.key]) for hit in hits}
    fused = None if ranking.fused is None else {h.key: ranking.fused[h.key] for h in hits}
    # done when it dropped some (it judged them), or it saw every child the search has
    done = len(order) < len(sent) or (ranking.exhausted and len(sent) == len(ranking.hits))
    return Ranked(hits, relevance, fused, ranking.scale, done, None, None, scores, ranking.query)
