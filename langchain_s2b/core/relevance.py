"""Relevance in the query's own terms: which hits count as evidence, for any embedding model.

A cosine means different things to different models: multilingual-e5-small
puts a query's 20 best sentences within 0.07 of each other, all-MiniLM-L6-v2
spreads them several times wider. A margin in cosine units tuned on one
starves the other. So every query's scores are read against their own
distribution: the mean and standard deviation of the dense scores of the
query's :data:`STATS_DEPTH` best children (:class:`Scale`). A hit's
*relevance* is its z-score on that scale (under hybrid search, the fused
``z(dense) + 0.3 z(BM25)``, :mod:`~langchain_s2b.core.fusion`), and the
*evidence* is every hit whose relevance is within ``margin`` of the best one,
``margin`` in standard deviations: the same number means the same thing for
every model (any model whose scores are an affine function of another's
gives exactly the same decisions). A hit whose cosine is not above 0 shares
nothing with the query and is never evidence.

The scale is taken from the first :data:`STATS_DEPTH` hits only, whatever
depth a search reached, so searching deeper (for ``k`` results, or for more
evidence) never changes a hit's relevance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import sub

import numpy as np

from langchain_s2b.core.hits import C

STATS_DEPTH = 100
"""How many of a query's best dense scores its scale is measured on."""


@dataclass(frozen=True)
class Scale:
    """The mean and (population) standard deviation of a query's best dense scores."""

    mean: float = 0.0
    std: float = 0.0

    def z(self, score: float) -> float:
        """``(score - mean) / std``; 0 when the scores did not spread at all."""
        return (score - self.mean) / self.std if self.std > 0 else 0.0

    def zs(self, scores: Iterable[float]) -> list[float]:
        """:meth:`z` of each score (the same floats, in one pass)."""
        mean, std = self.mean, self.std
        if std > 0:
            return [(score - mean) / std for score in scores]
        return [0.0 for _ in scores]

    def z_array(self, scores: np.ndarray) -> np.ndarray:
        """:meth:`z` of each of an array of scores (doubles: the same floats as :meth:`zs`)."""
        if self.std > 0:
            return (np.asarray(scores, dtype=np.float64) - self.mean) / self.std
        return np.zeros(len(scores), dtype=np.float64)


def scale_of(scores: Sequence[float], depth: int = STATS_DEPTH) -> Scale:
    """The scale of the first ``depth`` of ``scores`` (best first).

    All equal (or one, or none) -> a zero spread: every such score is as
    relevant as the best.
    """
    top = list(scores[:depth])
    if not top or max(top) == min(top):  # not std == 0: a float mean of equal values may miss
        return Scale(top[0] if top else 0.0, 0.0)
    mean = sum(top) / len(top)
    squares = map(pow, map(sub, top, repeat(mean)), repeat(2))  # each (s - mean) ** 2, in C
    return Scale(mean, math.sqrt(sum(squares) / len(top)))


def cut(relevance: Mapping[str, float], margin: float) -> float:
    """The least relevance that still counts: the best less ``margin``."""
    if margin < 0 or math.isnan(margin):
        msg = f"margin must be 0 or more standard deviations; got {margin!r}."
        raise ValueError(msg)
    return max(relevance.values(), default=0.0) - margin


def evidence(hits: Sequence[C], relevance: Mapping[str, float], margin: float) -> list[C]:
    """The hits that count as evidence, in rank order.

    Those whose cosine is above 0 and whose relevance is within ``margin``
    standard deviations of the best relevance of all ``hits``.
    """
    if not hits:
        return []
    bar = cut({hit.key: relevance[hit.key] for hit in hits}, margin)
    return [hit for hit in hits if hit.score > 0 and relevance[hit.key] >= bar]


def confident(
    hits: Sequence[C], relevance: Mapping[str, float], scale: Scale, margin: float, broad: float
) -> list[C]:
    """The hits that stand out: the evidence that decides an escalation, in rank order.

    Narrower than :func:`evidence` on purpose: the evidence (within ``broad``
    of the best on the rank score) whose cosine stands out too, within
    ``margin`` standard deviations of the best hit's on the cosine's own
    scale. A hit that BM25 alone lifts into the evidence, or whose cosine
    trails the best one's by more than ``margin``, never decides that the
    hits span several parents. (The cosine's scale, not the fused one, is the
    measure: it is read on the query's 100 best, where a fused list of two
    lexical hits would stand them ``2`` apart whatever their scores.)
    """
    found = evidence(hits, relevance, broad)
    if not found:
        return []
    dense = {hit.key: scale.z(hit.score) for hit in found}
    bar = max(dense.values()) - margin
    return [hit for hit in found if dense[hit.key] >= bar]
