"""Spending a token budget: which leaves around the ranked hits to return, as contiguous runs.

Every mode hands the allocator the same things: the ranked hits (as
:class:`Seed` objects, each with the range of leaves it may grow into, which is
where the mode's shape lives: a window, a parent, a document), the fetched
leaves around them, a budget and a ``token_counter``.

**Value.** A leaf is worth, summed over the seeds that reach it,
``1 / (rank + 1) * decay ** distance``: a seed's own leaf is worth the
reciprocal of its rank, and each step away from it halves that (with the
default ``decay = 0.5``). On the dev set the answer lies in the best hit two
times in three and one leaf away from it more often than in the third hit,
and this rule ranks exactly those alternatives (see the README's budget
section). Summing over seeds lets two nearby hits pull in the text between
them.

**Choice.** Breadth-first by value: the most valuable leaf that is a seed or
touches an already chosen leaf is taken if it fits what is left of the budget,
else dropped for good (what is left only shrinks). So the best distinct hits
come first, then context grows outwards around them, each step the one worth
most; every run holds a hit, and a leaf is never cut. When all leaves cost the
same, the chosen leaves have the greatest total value any choice of that many
leaves has (the tests check this against brute force): a leaf that is not a
seed always has a neighbour worth at least as much, so the ``m`` most valuable
leaves are connected to seeds.

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
from langchain_s2b.core.merge import Chunk, merge_chunks

LeafId = tuple[str, int]
"""``(source key, split id)`` of a leaf."""

DECAY = 0.5
"""Default factor per step away from a hit: halving."""


@dataclass(frozen=True)
class Seed:
    """A ranked hit (its leaf) and the leaves ``[lo, hi]`` it may grow into."""

    source: str
    split: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not self.lo <= self.split <= self.hi:
            msg = f"Seed reach [{self.lo}, {self.hi}] must hold its own leaf {self.split}."
            raise ValueError(msg)


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


def leaf_values(
    seeds: Sequence[Seed], decay: float = DECAY, max_distance: int | None = None
) -> dict[LeafId, float]:
    """Each reachable leaf's value, summed over the seeds (a repeated seed counts once)."""
    values: dict[LeafId, float] = {}
    seen: set[LeafId] = set()
    for rank, seed in enumerate(seeds):
        if (seed.source, seed.split) in seen:
            continue
        seen.add((seed.source, seed.split))
        lo, hi = seed.lo, seed.hi
        if max_distance is not None:
            lo, hi = max(lo, seed.split - max_distance), min(hi, seed.split + max_distance)
        weight = 1.0 / (rank + 1)
        for split in range(lo, hi + 1):
            leaf = (seed.source, split)
            values[leaf] = values.get(leaf, 0.0) + weight * decay ** abs(split - seed.split)
    return values


def allocate(
    seeds: Sequence[Seed],
    leaves: Mapping[LeafId, Chunk],
    budget: int,
    token_counter: TokenCounter,
    *,
    decay: float = DECAY,
    max_distance: int | None = None,
) -> list[Run]:
    """Choose whole leaves around ``seeds`` within ``budget``; runs best seed first.

    Args:
        seeds: the hits, best first (rank = position).
        leaves: the fetched leaves by ``(source, split)``; a leaf that is
            absent (deleted, never fetched) is never chosen, and a run ends there.
        budget: tokens for all runs together.
        token_counter: text -> tokens.
        decay: value factor per step away from a seed (``0 < decay < 1``).
        max_distance: grow at most this many leaves from a seed (``None``: its reach).
    """
    if budget < 0:
        msg = f"budget must be 0 or more tokens; got {budget!r}."
        raise ValueError(msg)
    if not 0 < decay < 1:
        msg = f"decay must be between 0 and 1 (exclusive); got {decay!r}."
        raise ValueError(msg)
    values = {k: v for k, v in leaf_values(seeds, decay, max_distance).items() if k in leaves}
    chosen = _grow(seeds, values, _distances(seeds), leaves, budget, token_counter)
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
    seeds: Sequence[Seed],
    values: Mapping[LeafId, float],
    distance: Callable[[LeafId], int],
    leaves: Mapping[LeafId, Chunk],
    budget: int,
    token_counter: TokenCounter,
) -> list[LeafId]:
    """Chosen leaves in the order they were taken (the breadth-first greedy).

    Ties in value go to the leaf nearer a seed (a hit before context), then by
    position, so the choice does not depend on the order of the input.
    """
    heap: list[tuple[float, int, str, int]] = []
    queued: set[LeafId] = set()

    def offer(leaf: LeafId) -> None:
        if leaf in values and leaf not in queued:
            queued.add(leaf)
            heapq.heappush(heap, (-values[leaf], distance(leaf), leaf[0], leaf[1]))

    for seed in seeds:
        offer((seed.source, seed.split))
    chosen: list[LeafId] = []
    left = budget
    while heap and left > 0:
        _, _, source, split = heapq.heappop(heap)
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
