"""Spending a token budget by value: pack mode's allocator.

The caller hands over the *seeds* (the hits that count as evidence, best
first, as :class:`Seed` objects, each with its weight and the range of leaves
it may grow into), the fetched leaves around them, a budget and a
``token_counter``.

**Value.** A leaf is worth, summed over the seeds that reach it,
``weight * decay ** distance``: a seed's own leaf is worth its weight, and
each step away from it halves that (with the default ``decay = 0.5``).
Summing over seeds lets two nearby hits pull in the text between them.

**Choice, breadth first by value.** The most valuable leaf that is a seed or
touches an already chosen leaf is taken if it fits what is left of the
budget, else dropped for good (what is left only shrinks). So a small budget
goes to the best hits and the sentences next to them before weaker hits. A
leaf worth less than the *floor* is never taken: the floor is the weakest
seed's weight (or the value of the best seed's next-door neighbour, if that
is lower: a lone hit keeps its neighbours), so context stops where a sentence
is worth less than the weakest hit itself, and a budget larger than what is
relevant comes back partly unspent. Ties in value go to the leaf nearer a
seed, then by position.

**Budget.** Leaves are charged ``token_counter(leaf text)``. The runs are then
merged exactly by offsets and counted again as the caller will see them; if a
counter charges a merged run more than its leaves (no usual tokenizer does),
the last chosen leaves are given back until the total fits. The budget is
never exceeded.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from langchain_s2b.core.budget import TokenCounter
from langchain_s2b.core.keys import base_source_key
from langchain_s2b.core.merge import Chunk, merge_chunks

LeafId = tuple[str, int]
"""``(source key, split id)`` of a leaf."""

DECAY = 0.5
"""Default factor per step away from a hit: halving."""


@dataclass(frozen=True)
class Seed:
    """A hit that counts as evidence: its leaf, weight and reach (leaves ``[lo, hi]``)."""

    source: str
    split: int
    lo: int
    hi: int
    weight: float

    def __post_init__(self) -> None:
        if not self.lo <= self.split <= self.hi:
            msg = f"Seed reach [{self.lo}, {self.hi}] must hold its own leaf {self.split}."
            raise ValueError(msg)
        if not self.weight > 0:
            msg = f"A seed's weight must be above 0; got {self.weight!r}."
            raise ValueError(msg)

    def reaches(self, split: int) -> bool:
        """Whether the leaf ``split`` (of this seed's source) is in reach."""
        return self.lo <= split <= self.hi


@dataclass(frozen=True)
class Run:
    """Contiguous chosen leaves of one source, merged exactly."""

    source: str
    first: int
    last: int
    """Last split id, inclusive."""
    seeds: tuple[int, ...]
    """Ranks (positions in the seed list) of the seeds inside, best first."""
    start: int
    end: int
    text: str
    tokens: int


def floor_value(weights: Sequence[float], decay: float = DECAY) -> float:
    """The least value a context leaf must have: the weakest seed's weight.

    Never above the value of the best seed's next-door neighbour, so a lone
    hit (or one far stronger than the rest) still brings its neighbours.
    """
    if not weights:
        return 0.0
    return min(min(weights), decay * max(weights))


def reach(weights: Sequence[float], decay: float = DECAY) -> int:
    """How far from its nearest seed a leaf can be and still reach the floor.

    A leaf ``d`` steps from every seed is worth at most
    ``sum(weights) * decay ** d``; this is the largest ``d`` for which that
    bound is not below :func:`floor_value` (0 without seeds).
    """
    if not weights:
        return 0
    if min(weights) <= 0 or not 0 < decay < 1:
        msg = f"Seed weights must be above 0 and decay in (0, 1); got {weights!r}, {decay!r}."
        raise ValueError(msg)
    total, floor = sum(weights), floor_value(weights, decay)
    distance = 0
    while total * decay ** (distance + 1) >= floor:
        distance += 1
    return distance


def leaf_values(
    seeds: Sequence[Seed], leaves: Mapping[LeafId, Chunk], decay: float = DECAY
) -> dict[LeafId, float]:
    """The value of each of ``leaves`` some seed reaches, summed over the seeds.

    A repeated seed counts once; seeds are summed in rank order.
    """
    by_source: dict[str, list[Seed]] = {}
    seen: set[LeafId] = set()
    for seed in seeds:
        if (seed.source, seed.split) not in seen:
            seen.add((seed.source, seed.split))
            by_source.setdefault(seed.source, []).append(seed)
    values: dict[LeafId, float] = {}
    for source, split in leaves:
        value, reached = 0.0, False
        for seed in by_source.get(source, ()):
            if seed.reaches(split):
                value += seed.weight * decay ** abs(split - seed.split)
                reached = True
        if reached:
            values[(source, split)] = value
    return values


def allocate(
    seeds: Sequence[Seed],
    leaves: Mapping[LeafId, Chunk],
    budget: int,
    token_counter: TokenCounter,
    *,
    decay: float = DECAY,
) -> list[Run]:
    """Choose leaves by value around the seeds, within ``budget``; runs best seed first.

    Args:
        seeds: the evidence, best first (rank = position).
        leaves: the fetched leaves by ``(source, split)``; a leaf that is
            absent (deleted, never fetched) is never chosen, and a run ends there.
        budget: tokens for all runs together.
        token_counter: text -> tokens.
        decay: value factor per step away from a seed (``0 < decay < 1``).
    """
    if budget < 0:
        msg = f"budget must be 0 or more tokens; got {budget!r}."
        raise ValueError(msg)
    if not 0 < decay < 1:
        msg = f"decay must be between 0 and 1 (exclusive); got {decay!r}."
        raise ValueError(msg)
    floor = floor_value([seed.weight for seed in seeds], decay)
    values = {leaf: v for leaf, v in leaf_values(seeds, leaves, decay).items() if v >= floor}
    first = [(seed.source, seed.split) for seed in seeds]
    chosen = _grow(first, values, _distances(seeds), leaves, budget, token_counter)
    while True:
        runs = _runs(chosen, seeds, leaves, token_counter)
        if sum(run.tokens for run in runs) <= budget:
            return runs
        chosen.pop()


def _distances(seeds: Sequence[Seed]) -> Callable[[LeafId], int]:
    """A leaf's distance to the nearest seed of its source (the tie-break).

    Asked only for the leaves the greedy offers, a few of the many valued ones.
    """
    by_source: dict[str, list[int]] = {}
    for seed in seeds:
        by_source.setdefault(seed.source, []).append(seed.split)
    for splits in by_source.values():
        splits.sort()

    def distance(leaf: LeafId) -> int:
        splits = by_source[leaf[0]]
        i = bisect.bisect_left(splits, leaf[1])  # the nearest seeds are either side of it
        return min(abs(leaf[1] - s) for s in (splits[i - 1 : i + 1] if i else splits[:1]))

    return distance


def _grow(
    seeds: Sequence[LeafId],
    values: Mapping[LeafId, float],
    distance: Callable[[LeafId], int],
    leaves: Mapping[LeafId, Chunk],
    budget: int,
    token_counter: TokenCounter,
) -> list[LeafId]:
    """The leaves in the order they were taken (the breadth-first greedy from the seeds).

    Ties in value go to the leaf nearer a seed, then by position (source key,
    whatever its generation, then split id), so the choice does not depend on
    the order of the input or the update history.
    """
    heap: list[tuple[float, int, str, int, str]] = []
    queued: set[LeafId] = set()

    def offer(leaf: LeafId) -> None:
        if leaf in values and leaf not in queued:
            queued.add(leaf)
            entry = (-values[leaf], distance(leaf), base_source_key(leaf[0]), leaf[1], leaf[0])
            heapq.heappush(heap, entry)

    for seed in seeds:
        if seed in leaves:
            offer(seed)
    chosen: list[LeafId] = []
    left = budget
    while heap and left > 0:
        _, _, _, split, source = heapq.heappop(heap)
        cost = token_counter(leaves[(source, split)].text)
        if cost > left:
            continue
        left -= cost
        chosen.append((source, split))
        offer((source, split - 1))
        offer((source, split + 1))
    return chosen


def _runs(
    chosen: Sequence[LeafId],
    seeds: Sequence[Seed],
    leaves: Mapping[LeafId, Chunk],
    token_counter: TokenCounter,
) -> list[Run]:
    rank_of: dict[LeafId, int] = {}
    for rank, seed in enumerate(seeds):
        rank_of.setdefault((seed.source, seed.split), rank)
    groups: list[list[LeafId]] = []
    for leaf in sorted(chosen):
        last = groups[-1][-1] if groups else None
        if last is not None and last[0] == leaf[0] and last[1] + 1 == leaf[1]:
            groups[-1].append(leaf)
        else:
            groups.append([leaf])
    runs = []
    for group in groups:
        merged = merge_chunks([leaves[leaf] for leaf in group])
        inside = tuple(sorted(rank_of[leaf] for leaf in group if leaf in rank_of))
        runs.append(
            Run(
                group[0][0],
                group[0][1],
                group[-1][1],
                inside,
                merged.start,
                merged.end,
                merged.text,
                token_counter(merged.text),
            )
        )
    return sorted(runs, key=lambda run: run.seeds[0] if run.seeds else len(seeds))
