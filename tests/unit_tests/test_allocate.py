"""Pack mode's allocator (by value): hand-worked cases and properties against brute force.

The brute-force tests compute every value themselves (``weight / 2 ** distance``
summed over the seeds that reach a leaf), never through ``leaf_values``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_s2b.core.allocate import (
    LeafId,
    Run,
    Seed,
    _distances,
    allocate,
    floor_value,
    leaf_values,
    reach,
)
from langchain_s2b.core.merge import Chunk


def make_leaves(sizes: Mapping[str, Sequence[int]], missing: Sequence[LeafId] = ()) -> dict:
    """Leaves of each source with the given lengths, tiling its text; letters name sources."""
    leaves: dict[LeafId, Chunk] = {}
    for source, lengths in sizes.items():
        cursor = 0
        for split, length in enumerate(lengths):
            text = chr(ord("a") + split % 26) * length
            if (source, split) not in missing:
                leaves[(source, split)] = Chunk(cursor, cursor + length, text, split)
            cursor += length
    return leaves


def spans(runs: Sequence[Run]) -> list[tuple[str, int, int, tuple[int, ...]]]:
    return [(r.source, r.first, r.last, r.seeds) for r in runs]


def ranked(*seeds: tuple[str, int, int, int]) -> list[Seed]:
    """Seeds weighted ``1 / (rank + 1)``, as retrieval weights them."""
    return [Seed(s, split, lo, hi, 1 / (r + 1)) for r, (s, split, lo, hi) in enumerate(seeds)]


class TestValues:
    def test_weight_times_halving_summed_over_seeds(self) -> None:
        seeds = ranked(("a", 1, 0, 6), ("a", 5, 0, 6))
        assert leaf_values(seeds, make_leaves({"a": [1] * 8})) == {
            ("a", 0): 1 / 2 + 0.5 / 32,
            ("a", 1): 1 + 0.5 / 16,
            ("a", 2): 1 / 2 + 0.5 / 8,
            ("a", 3): 1 / 4 + 0.5 / 4,
            ("a", 4): 1 / 8 + 0.5 / 2,
            ("a", 5): 1 / 16 + 0.5,
            ("a", 6): 1 / 32 + 0.5 / 2,
        }

    def test_a_seed_reaches_only_its_range(self) -> None:
        assert leaf_values([Seed("a", 3, 2, 4, 1.0)], make_leaves({"a": [1] * 6})) == {
            ("a", 2): 0.5,
            ("a", 3): 1.0,
            ("a", 4): 0.5,
        }

    def test_a_repeated_seed_counts_once(self) -> None:
        seeds = ranked(("a", 0, 0, 0), ("a", 0, 0, 0))
        assert leaf_values(seeds, make_leaves({"a": [1, 1]})) == {("a", 0): 1.0}

    def test_seed_outside_its_reach_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"Seed reach \[2, 4\] must hold its own leaf 1"):
            Seed("a", 1, 2, 4, 1.0)

    def test_a_weight_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match=r"A seed's weight must be above 0; got 0.0"):
            Seed("a", 1, 1, 1, 0.0)

    @pytest.mark.parametrize(
        ("weights", "floor", "distance"),
        [
            ([], 0.0, 0),
            ([1.0], 0.5, 1),  # a lone hit keeps its neighbours: 1/2 >= 1/2, 1/4 < 1/2
            ([1.0, 0.5], 0.5, 1),  # 1.5/2 >= .5, 1.5/4 < .5
            ([1.0, 0.5, 1 / 3], 1 / 3, 2),  # (11/6)/4 >= 1/3, (11/6)/8 < 1/3
            ([1 / (r + 1) for r in range(20)], 1 / 20, 6),  # H20 = 3.6 -> 3.6/64 >= .05
        ],
    )
    def test_the_floor_is_the_weakest_seed_and_reach_bounds_every_leaf_above_it(
        self, weights: list[float], floor: float, distance: int
    ) -> None:
        assert floor_value(weights) == pytest.approx(floor)
        assert reach(weights) == distance


class TestAllocate:
    def test_grows_from_the_hit_and_skips_what_does_not_fit(self) -> None:
        # one seed: floor 1/2, so only its neighbours 1 and 3 (.5) may join; costs 3 5 4 2 1
        # budget 8: take 2 (4 left); 1 costs 5 (dropped); 3 (2 left); 0 and 4 are below the floor
        leaves = make_leaves({"a": [3, 5, 4, 2, 1]})
        runs = allocate([Seed("a", 2, 0, 4, 1.0)], leaves, 8, len)
        assert spans(runs) == [("a", 2, 3, (0,))]
        assert (runs[0].start, runs[0].end, runs[0].text, runs[0].tokens) == (8, 14, "ccccdd", 6)

    def test_the_best_hits_neighbours_come_before_a_weaker_hit(self) -> None:
        # seeds a/1 (1), b/0 (1/2), c/0 (1/3): a/0 and a/2 are worth 1/2, as much as b/0, which
        # is nearer a seed (itself) and comes first; c/0 (1/3) comes after both neighbours
        leaves = make_leaves({"a": [1, 1, 1], "b": [1], "c": [1]})
        seeds = ranked(("a", 1, 0, 2), ("b", 0, 0, 0), ("c", 0, 0, 0))
        assert spans(allocate(seeds, leaves, 2, len)) == [("a", 1, 1, (0,)), ("b", 0, 0, (1,))]
        assert spans(allocate(seeds, leaves, 3, len)) == [("a", 0, 1, (0,)), ("b", 0, 0, (1,))]
        assert spans(allocate(seeds, leaves, 4, len)) == [("a", 0, 2, (0,)), ("b", 0, 0, (1,))]
        assert spans(allocate(seeds, leaves, 5, len)) == [
            ("a", 0, 2, (0,)),
            ("b", 0, 0, (1,)),
            ("c", 0, 0, (2,)),
        ]

    def test_two_hits_pull_in_the_text_between_them(self) -> None:
        leaves = make_leaves({"a": [1] * 7})
        seeds = ranked(("a", 1, 0, 6), ("a", 3, 0, 6))
        # values: 1 is 1 + 1/8, 2 and 3 are 3/4 (3, a seed, first), 0 is 1/2 + 1/32; floor 1/2
        assert spans(allocate(seeds, leaves, 2, len)) == [("a", 1, 1, (0,)), ("a", 3, 3, (1,))]
        assert spans(allocate(seeds, leaves, 3, len)) == [("a", 1, 3, (0, 1))]
        assert spans(allocate(seeds, leaves, 4, len)) == [("a", 0, 3, (0, 1))]
        # 4 is worth 1/8 + 1/4 < 1/2: never taken, however large the budget
        assert spans(allocate(seeds, leaves, 100, len)) == [("a", 0, 3, (0, 1))]

    def test_context_stops_below_the_weakest_seed(self) -> None:
        # four seeds: floor 1/4; around the best (a/5) context reaches 2 leaves each way
        leaves = make_leaves({"a": [1] * 11, "b": [1], "c": [1], "d": [1]})
        seeds = ranked(("a", 5, 0, 10), ("b", 0, 0, 0), ("c", 0, 0, 0), ("d", 0, 0, 0))
        runs = allocate(seeds, leaves, 1000, len)
        assert spans(runs) == [
            ("a", 3, 7, (0,)),
            ("b", 0, 0, (1,)),
            ("c", 0, 0, (2,)),
            ("d", 0, 0, (3,)),
        ]
        assert sum(run.tokens for run in runs) == 8  # far below the budget: it is a ceiling

    def test_a_window_reach_is_never_left(self) -> None:
        leaves = make_leaves({"a": [1] * 5})
        seeds = ranked(("a", 2, 1, 3), ("a", 4, 4, 4), ("a", 0, 0, 0))
        # floor 1/3: 1 and 3 are worth .5 (+ .125 for 3); 0 and 4 are seeds; the run is whole
        assert spans(allocate(seeds, leaves, 100, len)) == [("a", 0, 4, (0, 1, 2))]
        assert spans(allocate([Seed("a", 2, 1, 3, 1.0)], leaves, 100, len)) == [("a", 1, 3, (0,))]

    def test_a_missing_leaf_ends_the_run(self) -> None:
        leaves = make_leaves({"a": [1] * 5}, missing=[("a", 2)])
        assert spans(allocate([Seed("a", 1, 0, 4, 1.0)], leaves, 100, len)) == [("a", 0, 1, (0,))]

    def test_a_hit_too_long_is_passed_over_and_the_next_is_placed(self) -> None:
        leaves = make_leaves({"a": [10], "b": [3]})
        runs = allocate(ranked(("a", 0, 0, 0), ("b", 0, 0, 0)), leaves, 5, len)
        assert spans(runs) == [("b", 0, 0, (1,))]

    def test_runs_come_best_seed_first(self) -> None:
        leaves = make_leaves({"a": [1, 1], "b": [1, 1]})
        seeds = ranked(("b", 1, 1, 1), ("a", 0, 0, 0))
        assert spans(allocate(seeds, leaves, 10, len)) == [("b", 1, 1, (0,)), ("a", 0, 0, (1,))]

    def test_zero_budget_returns_nothing(self) -> None:
        assert allocate([Seed("a", 0, 0, 0, 1.0)], make_leaves({"a": [1]}), 0, len) == []

    def test_a_counter_that_charges_merged_text_more_gives_leaves_back(self) -> None:
        # each leaf costs 2**2 = 4, both 8 = budget, but the merged run costs 4**2 = 16.
        leaves = make_leaves({"a": [2, 2]})
        runs = allocate([Seed("a", 0, 0, 1, 1.0)], leaves, 8, lambda t: len(t) ** 2)
        assert spans(runs) == [("a", 0, 0, (0,))]
        assert runs[0].tokens == 4

    @pytest.mark.parametrize(("budget", "decay"), [(-1, 0.5), (1, 0.0), (1, 1.0)])
    def test_bad_arguments_are_named(self, budget: int, decay: float) -> None:
        with pytest.raises(ValueError, match=r"^(budget|decay) "):
            allocate([], {}, budget, len, decay=decay)


# Properties: the allocator against a statement of the rule computed here -------------


@st.composite
def problems(draw: st.DrawFn, unit: bool) -> tuple[dict, list[Seed], int]:
    n_sources = draw(st.integers(1, 2))
    sizes = {}
    for source in "ab"[:n_sources]:
        n = draw(st.integers(1, 6))
        sizes[source] = (
            [1] * n if unit else draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
        )
    seeds = []
    for rank in range(draw(st.integers(1, 4))):
        source = draw(st.sampled_from(sorted(sizes)))
        last = len(sizes[source]) - 1
        split = draw(st.integers(0, last))
        lo, hi = draw(st.integers(0, split)), draw(st.integers(split, last))
        weight = draw(st.sampled_from([1 / (rank + 1), 0.3, 1.0, 2.0]))
        seeds.append(Seed(source, split, lo, hi, weight))
    budget = draw(st.integers(0, 24))
    return make_leaves(sizes), seeds, budget


def values_of(seeds: Sequence[Seed], leaves: dict) -> dict[LeafId, float]:
    """Every reachable leaf's value, written out: a repeated seed counts once."""
    firsts: dict[LeafId, Seed] = {}
    for seed in seeds:
        firsts.setdefault((seed.source, seed.split), seed)
    values: dict[LeafId, float] = {}
    for seed in firsts.values():
        for split in range(seed.lo, seed.hi + 1):
            gain = seed.weight * 0.5 ** abs(split - seed.split)
            values[(seed.source, split)] = values.get((seed.source, split), 0.0) + gain
    return values


def floor_of(seeds: Sequence[Seed]) -> float:
    weights = [seed.weight for seed in seeds]
    return min(min(weights), max(weights) / 2)


def chosen_leaves(runs: Sequence[Run]) -> set[LeafId]:
    return {(r.source, s) for r in runs for s in range(r.first, r.last + 1)}


def connected(subset: set[LeafId], anchors: set[LeafId]) -> bool:
    """Every maximal run of ``subset`` holds an anchor."""
    for source, split in subset:
        lo = split
        while (source, lo - 1) in subset:
            lo -= 1
        hi = split
        while (source, hi + 1) in subset:
            hi += 1
        if not any((source, i) in anchors for i in range(lo, hi + 1)):
            return False
    return True


@settings(max_examples=300, deadline=None, derandomize=True)
@given(problems(unit=False))
def test_only_text_worth_the_floor_grown_from_the_hits(
    problem: tuple[dict, list[Seed], int],
) -> None:
    leaves, seeds, budget = problem
    runs = allocate(seeds, leaves, budget, len)
    used = sum(r.tokens for r in runs)
    assert used <= budget
    chosen = chosen_leaves(runs)
    seed_leaves = {(s.source, s.split) for s in seeds}
    # every leaf is worth at least the floor, and every run holds a hit it grew from
    values, floor = values_of(seeds, leaves), floor_of(seeds)
    assert all(values[leaf] >= floor for leaf in chosen)
    assert connected(chosen, seed_leaves)
    for run in runs:
        assert run.text == "".join(
            leaves[(run.source, s)].text for s in range(run.first, run.last + 1)
        )
        assert run.tokens == len(run.text)
        assert run.seeds
    # maximal: no leaf worth the floor that is a hit or touches a run still fits
    for leaf in set(values) - chosen:
        touches = (leaf[0], leaf[1] - 1) in chosen or (leaf[0], leaf[1] + 1) in chosen
        if (touches or leaf in seed_leaves) and values[leaf] >= floor:
            assert len(leaves[leaf].text) > budget - used


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(problems(unit=True))
def test_equal_costs_reach_the_brute_force_optimum(problem: tuple[dict, list[Seed], int]) -> None:
    """With every leaf costing the same, the choice is worth the most any choice is.

    Any set of leaves worth the floor, at most the budget of them, every run of it
    holding a hit: a leaf that is not a hit always has a neighbour worth at least as
    much, so the most valuable leaves are connected to the hits, and by value first
    the allocator takes them.
    """
    leaves, seeds, budget = problem
    values, floor = values_of(seeds, leaves), floor_of(seeds)
    runs = allocate(seeds, leaves, budget, len)
    got = sum(values[leaf] for leaf in chosen_leaves(runs))
    seed_leaves = {(s.source, s.split) for s in seeds}
    candidates = sorted(leaf for leaf, value in values.items() if value >= floor)
    best = 0.0
    for size in range(min(budget, len(candidates)) + 1):
        for subset in itertools.combinations(candidates, size):
            if connected(set(subset), seed_leaves):
                best = max(best, sum(values[leaf] for leaf in subset))
    assert got == pytest.approx(best, abs=1e-12)


@given(
    st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 40)), min_size=1, max_size=30),
    st.lists(st.integers(0, 40), max_size=40),
)
def test_the_distance_to_the_nearest_seed_equals_brute_force(
    placed: list[tuple[str, int]], splits: list[int]
) -> None:
    seeds = [Seed(source, split, split, split, 1.0) for source, split in placed]
    sources = {source for source, _ in placed}
    values = {(source, split): 1.0 for source in sources for split in splits}
    expected = {
        (source, split): min(abs(split - s.split) for s in seeds if s.source == source)
        for source, split in values
    }
    distance = _distances(seeds)
    assert {leaf: distance(leaf) for leaf in values} == expected
