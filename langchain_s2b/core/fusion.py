"""Hybrid ranking: a dense and a lexical top-N list fused by z-scores.

Each list is standardised on its own top-N (``(score - mean) / std``), so
cosine similarities and BM25 scores, which live on unrelated scales, become
comparable; a key that one list did not return gets that list's lowest z-score
(it ranked below everything the list returned). The fused score is
``z_dense + weight * z_lexical``. On the dev set this beat both lists alone at
every budget and was flat for ``weight`` in 0.1..0.5, whereas reciprocal-rank
fusion, which throws the score gaps away, was worse than dense search alone.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from itertools import repeat
from typing import TypeVar

import numpy as np

from langchain_s2b.core.relevance import scale_of

K = TypeVar("K", bound=Hashable)

LEXICAL_WEIGHT = 0.3
"""Default weight of the lexical z-score."""
TOP_N = 100
"""Default length of each list."""


def z_scores(scores: Sequence[float]) -> list[float]:
    """Standardised scores (population std); all equal (or one) -> zeros.

    On the scale of all of them (:func:`~langchain_s2b.core.relevance.scale_of`,
    the one home of the mean and spread).
    """
    return scale_of(scores, len(scores)).zs(scores)


def z_fuse(
    dense: Sequence[tuple[K, float]],
    lexical: Sequence[tuple[K, float]],
    weight: float = LEXICAL_WEIGHT,
) -> list[tuple[K, float]]:
    """The union of both lists by fused score, best first (ties keep dense order first).

    Each list is standardised over itself.

    Args:
        dense: ``(key, score)`` best first, higher is better; keys distinct.
        lexical: the same for the lexical list.
        weight: the lexical list's weight (``0`` keeps the dense order).
    """
    zd = dict(zip([k for k, _ in dense], z_scores([s for _, s in dense]), strict=True))
    floor = min(zd.values(), default=0.0)
    keys = list(dict.fromkeys([k for k, _ in dense] + [k for k, _ in lexical]))
    return fuse({key: zd.get(key, floor) for key in keys}, lexical, weight)


def fuse(
    dense_z: Mapping[K, float], lexical: Sequence[tuple[K, float]], weight: float = LEXICAL_WEIGHT
) -> list[tuple[K, float]]:
    """Every key of ``dense_z`` by ``dense_z[key] + weight * z(lexical)``, best first.

    ``dense_z`` holds each key's dense z-score, in dense rank order (keys only
    the lexical list found come last, in its order); the lexical list is
    standardised over itself, and a key it did not return gets its lowest
    z-score. Ties keep the order of ``dense_z``.
    """
    zs = z_scores([s for _, s in lexical])
    return fuse_z(dense_z, dict(zip([k for k, _ in lexical], zs, strict=True)), weight)


def fuse_z(
    dense_z: Mapping[K, float], lexical_z: Mapping[K, float], weight: float = LEXICAL_WEIGHT
) -> list[tuple[K, float]]:
    """:func:`fuse` with the lexical z-scores taken (a key not in them: their lowest)."""
    keys = list(dense_z)
    dense = np.fromiter(dense_z.values(), dtype=np.float64, count=len(keys))
    ordered, fused = fuse_arrays(keys, dense, lexical_z, weight)
    return list(zip(ordered, fused, strict=True))


def fuse_arrays(
    keys: Sequence[K], dense_z: np.ndarray, lexical_z: Mapping[K, float], weight: float
) -> tuple[list[K], list[float]]:
    """:func:`fuse_z` of ``keys`` with their dense z-scores as an array: keys and scores.

    The same floats as adding ``dense_z[i] + weight * lexical z`` key by key
    (IEEE-754 doubles, one operation at a time) and the same order (a stable
    sort: ties keep the order of ``keys``).
    """
    floor = min(lexical_z.values(), default=0.0)
    lexical = np.fromiter(map(lexical_z.get, keys, repeat(floor)), np.float64, len(keys))
    order, fused = _fused(dense_z, lexical, weight)
    return [keys[i] for i in order], fused


def fuse_at(
    dense_z: np.ndarray, lexical_z: Sequence[float], at: Sequence[int], weight: float
) -> tuple[list[int], list[float]]:
    """:func:`fuse_arrays` of positions: the lexical z-scores given at positions ``at``.

    ``lexical_z[i]`` belongs to position ``at[i]`` of ``dense_z`` (each position
    at most once); any other position gets their lowest. The fused order (as
    positions) and scores, the same floats and order as :func:`fuse_arrays`.
    """
    lexical = np.full(len(dense_z), min(lexical_z, default=0.0), dtype=np.float64)
    lexical[list(at)] = lexical_z
    return _fused(dense_z, lexical, weight)


def _fused(
    dense_z: np.ndarray, lexical: np.ndarray, weight: float
) -> tuple[list[int], list[float]]:
    """``dense_z + weight * lexical``, best first (a stable sort: ties keep their order)."""
    if weight < 0 or math.isnan(weight):
        msg = f"The lexical weight must be 0 or more; got {weight!r}."
        raise ValueError(msg)
    fused = dense_z + weight * lexical
    order = np.argsort(-fused, kind="stable").tolist()  # best first; ties in order
    return order, fused[order].tolist()
