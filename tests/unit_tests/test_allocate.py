"""The budget allocator: hand-worked cases and properties against brute force."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_s2b.core.allocate import LeafId, Run, Seed, _distances, allocate, leaf_values
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


class TestValues:
    def test_reciprocal_rank_times_halving_summed_over_seeds(self) -> None:
        seeds = [Seed("a", 1, 0, 6), Seed("a", 5, 0, 6)]
        values = leaf_values(seeds)
        assert values == {
            ("a", 0): 1 / 2 + 0.5 / 32,
            ("a", 1): 1 + 0.5 / 16,
            ("a", 2): 1 / 2 + 0.5 / 8,
            ("a", 3): 1 / 4 + 0.5 / 4,
            ("a", 4): 1 / 8 + 0.5 / 2,
            ("a", 5): 1 / 16 + 0.5,
            ("a", 6): 1 / 32 + 0.5 / 2,
        }

    def test_reach_and_max_distance_bound_a_seed(self) -> None:
        assert leaf_values([Seed("a", 3, 2, 9)], max_distance=1) == {
            ("a", 2): 0.5,
            ("a", 3): 1.0,
            ("a", 4): 0.5,
        }

    def test_a_repeated_seed_counts_once(self) -> None:
        assert leaf_values([Seed("a", 0, 0, 0), Seed("a", 0, 0, 0)]) == {("a", 0): 1.0}

    def test_seed_outside_its_reach_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"Seed reach \[2, 4\] must hold its own leaf 1"):
            Seed("a", 1, 2, 4)


class TestAllocate:
    def test_grows_from_the_hit_and_skips_what_does_not_fit(self) -> None:
        # values: 2 -> 1, 1 and 3 -> .5, 0 and 4 -> .25; costs 3 5 4 2 1; budget 8.
        # take 2 (4 left), 1 costs 5 (dropped), 3 (2 left), 4 (1 left); 0 never touches a run.
        leaves = make_leaves({"a": [3, 5, 4, 2, 1]})
        runs = allocate([Seed("a", 2, 0, 4)], leaves, 8, len)
        assert spans(runs) == [("a", 2, 4, (0,))]
        assert (runs[0].start, runs[0].end, runs[0].text, runs[0].tokens) == (8, 15, "ccccdde", 7)

    def test_two_hits_pull_in_the_text_between_them(self) -> None:
        leaves = make_leaves({"a": [1] * 7})
        seeds = [Seed("a", 1, 0, 6), Seed("a", 5, 0, 6)]
        # order by value: 1, then 5 and 2 tie at .5625 (5 is a hit: first), 0, then 4 and 3.
        assert spans(allocate(seeds, leaves, 2, len)) == [("a", 1, 1, (0,)), ("a", 5, 5, (1,))]
        assert spans(allocate(seeds, leaves, 4, len)) == [("a", 0, 2, (0,)), ("a", 5, 5, (1,))]
        assert spans(allocate(seeds, leaves, 5, len)) == [("a", 0, 2, (0,)), ("a", 4, 5, (1,))]
        assert spans(allocate(seeds, leaves, 6, len)) == [("a", 0, 5, (0, 1))]

    def test_a_window_reach_is_never_left(self) -> None:
        leaves = make_leaves({"a": [1] * 5})
        assert spans(allocate([Seed("a", 2, 1, 3)], leaves, 100, len)) == [("a", 1, 3, (0,))]

    def test_a_missing_leaf_ends_the_run(self) -> None:
        leaves = make_leaves({"a": [1] * 5}, missing=[("a", 2)])
        assert spans(allocate([Seed("a", 1, 0, 4)], leaves, 100, len)) == [("a", 0, 1, (0,))]

    def test_a_hit_too_long_is_dropped_whole_and_the_next_is_taken(self) -> None:
        leaves = make_leaves({"a": [10], "b": [3]})
        runs = allocate([Seed("a", 0, 0, 0), Seed("b", 0, 0, 0)], leaves, 5, len)
        assert spans(runs) == [("b", 0, 0, (1,))]

    def test_runs_come_best_seed_first(self) -> None:
        leaves = make_leaves({"a": [1, 1], "b": [1, 1]})
        seeds = [Seed("b", 1, 1, 1), Seed("a", 0, 0, 0)]
        assert spans(allocate(seeds, leaves, 10, len)) == [("b", 1, 1, (0,)), ("a", 0, 0, (1,))]

    def test_zero_budget_returns_nothing(self) -> None:
        assert allocate([Seed("a", 0, 0, 0)], make_leaves({"a": [1]}), 0, len) == []

    def test_a_counter_that_charges_merged_text_more_gives_leaves_back(self) -> None:
        # each leaf costs 2**2 = 4, both 8 = budget, but the merged run costs 4**2 = 16.
        leaves = make_leaves({"a": [2, 2]})
        runs = allocate([Seed("a", 0, 0, 1)], leaves, 8, lambda t: len(t) ** 2)
        assert spans(runs) == [("a", 0, 0, (0,))]
        assert runs[0].tokens == 4

    @pytest.mark.parametrize(("budget", "decay"), [(-1, 0.5), (1, 0.0), (1, 1.0)])
    def test_bad_arguments_are_named(self, budget: int, decay: float) -> None:
        with pytest.raises(ValueError, match=r"^(budget|decay) "):
            allocate([], {}, budget, len, decay=decay)


# Properties ---------------------------------------------------------------------------


@st.composite
def problems(draw: st.DrawFn, unit: bool) -> tuple[dict, list[Seed], int, int | None]:
    n_sources = draw(st.integers(1, 2))
    sizes = {}
    for source in "ab"[:n_sources]:
        n = draw(st.integers(1, 5))
        sizes[source] = (
            [1] * n if unit else draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
        )
    seeds = []
    for _ in range(draw(st.integers(1, 3))):
        source = draw(st.sampled_from(sorted(sizes)))
        last = len(sizes[source]) - 1
        split = draw(st.integers(0, last))
        lo, hi = draw(st.integers(0, split)), draw(st.integers(split, last))
        seeds.append(Seed(source, split, lo, hi))
    budget = draw(st.integers(0, 20))
    max_distance = draw(st.none() | st.integers(0, 3))
    return make_leaves(sizes), seeds, budget, max_distance


def chosen_leaves(runs: Sequence[Run]) -> set[LeafId]:
    return {(r.source, s) for r in runs for s in range(r.first, r.last + 1)}


def connected(subset: set[LeafId], seeds: Sequence[Seed]) -> bool:
    """Every maximal run of ``subset`` holds a seed."""
    seed_leaves = {(s.source, s.split) for s in seeds}
    for source, split in subset:
        lo = split
        while (source, lo - 1) in subset:
            lo -= 1
        hi = split
        while (source, hi + 1) in subset:
            hi += 1
        if not any((source, i) in seed_leaves for i in range(lo, hi + 1)):
            return False
    return True


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problems(unit=False))
def test_budget_runs_and_maximality(problem: tuple[dict, list[Seed], int, int | None]) -> None:
    leaves, seeds, budget, max_distance = problem
    runs = allocate(seeds, leaves, budget, len, max_distance=max_distance)
    used = sum(r.tokens for r in runs)
    assert used <= budget
    values = leaf_values(seeds, max_distance=max_distance)
    chosen = chosen_leaves(runs)
    assert chosen <= set(values)
    assert connected(chosen, seeds)
    for run in runs:
        assert run.text == "".join(
            leaves[(run.source, s)].text for s in range(run.first, run.last + 1)
        )
        assert run.tokens == len(run.text)
        assert run.seeds
    # maximal: nothing that could still join (a hit, or a reachable neighbour of a run) fits
    seed_leaves = {(s.source, s.split) for s in seeds}
    for leaf in set(values) - chosen:
        touches = (leaf[0], leaf[1] - 1) in chosen or (leaf[0], leaf[1] + 1) in chosen
        if leaf in seed_leaves or touches:
            assert len(leaves[leaf].text) > budget - used


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(problems(unit=True))
def test_equal_costs_reach_the_brute_force_optimum(
    problem: tuple[dict, list[Seed], int, int | None],
) -> None:
    leaves, seeds, budget, max_distance = problem
    values = leaf_values(seeds, max_distance=max_distance)
    runs = allocate(seeds, leaves, budget, len, max_distance=max_distance)
    got = sum(values[leaf] for leaf in chosen_leaves(runs))
    best = 0.0
    candidates = sorted(values)
    for size in range(min(budget, len(candidates)) + 1):
        for subset in itertools.combinations(candidates, size):
            if connected(set(subset), seeds):
                best = max(best, sum(values[leaf] for leaf in subset))
    assert got == pytest.approx(best, abs=1e-12)


@given(
    st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 40)), min_size=1, max_size=30),
    st.lists(st.integers(0, 40), max_size=40),
)
def test_the_distance_to_the_nearest_seed_equals_brute_force(
    placed: list[tuple[str, int]], splits: list[int]
) -> None:
    seeds = [Seed(source, split, split, split) for source, split in placed]
    sources = {source for source, _ in placed}
    values = {(source, split): 1.0 for source in sources for split in splits}
    expected = {
        (source, split): min(abs(split - s.split) for s in seeds if s.source == source)
        for source, split in values
    }
    distance = _distances(seeds)
    assert {leaf: distance(leaf) for leaf in values} == expected
