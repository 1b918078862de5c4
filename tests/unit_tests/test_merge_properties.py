"""Property tests: merged windows are exact source slices, coalesced windows never overlap."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore
from langchain_text_splitters import TextSplitter

from langchain_s2b import WindowSplitter
from langchain_s2b.core.hits import Scored, dedupe_hits, hit_from_metadata
from langchain_s2b.core.ingest import identify, prepare
from langchain_s2b.core.merge import Chunk, merge_chunks
from langchain_s2b.core.tree import Level
from langchain_s2b.core.window import assemble_windows, place_windows, plan_windows

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Letters, digits, whitespace, punctuation, accents, CJK, emoji: every char is one code point.
ALPHABET = st.characters(
    codec="utf-8", categories=("L", "N", "P", "S", "Zs", "Mn"), include_characters="\n\t "
)
texts = st.text(ALPHABET, min_size=1, max_size=120)


def slice_with_gaps(text: str, start: int, end: int, gaps: Sequence[tuple[int, int]]) -> str:
    """``text[start:end]`` with every gap replaced by the one-space fill."""
    out, cursor = [], start
    for a, b in gaps:
        out += [text[cursor:a], " "]
        cursor = b
    out.append(text[cursor:end])
    return "".join(out)


def uncovered(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Char ranges between the first start and the last end that no span covers."""
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    covered = [False] * (hi - lo)
    for a, b in spans:
        covered[a - lo : b - lo] = [True] * (b - a)
    gaps, i = [], 0
    while i < len(covered):
        if covered[i]:
            i += 1
            continue
        j = i
        while j < len(covered) and not covered[j]:
            j += 1
        gaps.append((lo + i, lo + j))
        i = j
    return gaps


@st.composite
def text_and_spans(draw: st.DrawFn) -> tuple[str, list[tuple[int, int]]]:
    """Any spans of a text: overlapping, contained, repeated, empty, disjoint; unsorted."""
    text = draw(texts)
    n = len(text)
    pairs = draw(st.lists(st.tuples(st.integers(0, n), st.integers(0, n)), min_size=1, max_size=12))
    spans = [(min(a, b), max(a, b)) for a, b in pairs]
    spans += draw(st.lists(st.sampled_from(spans), max_size=3))  # identical offsets
    return text, draw(st.permutations(spans))


@st.composite
def covering_chunking(draw: st.DrawFn) -> tuple[str, list[tuple[int, int]]]:
    """A gap-free chunking of a text: tiles with random overlaps, contained chunks, duplicates."""
    text = draw(texts)
    n = len(text)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=10))) - {n})
    bounds = [0, *cuts, n]
    spans = []
    for a, b in pairwise(bounds):
        spans.append((a, min(n, b + draw(st.integers(0, 8)))))
    for a, b in list(spans):
        if draw(st.booleans()):
            inner_a = draw(st.integers(a, b))
            spans.append((inner_a, draw(st.integers(inner_a, b))))  # contained
    spans += draw(st.lists(st.sampled_from(spans), max_size=3))
    return text, draw(st.permutations(spans))


class TestMergeChunks:
    @PROPERTY
    @given(case=text_and_spans())
    def test_result_is_the_slice_it_claims_with_reported_gaps(self, case):
        text, spans = case
        merged = merge_chunks([Chunk(a, b, text[a:b], i) for i, (a, b) in enumerate(spans)])
        covering = [(a, b) for a, b in spans if b > a]  # empty chunks cover nothing
        if not covering:
            assert (merged.text, merged.start, merged.end) == ("", spans[0][0], spans[0][0])
            return
        assert merged.start == min(a for a, _ in covering)
        assert merged.end == max(b for _, b in covering)
        assert list(merged.gaps) == uncovered(covering)
        assert merged.text == slice_with_gaps(text, merged.start, merged.end, merged.gaps)

    @PROPERTY
    @given(case=covering_chunking())
    def test_gap_free_chunks_merge_to_the_exact_slice(self, case):
        text, spans = case
        merged = merge_chunks([Chunk(a, b, text[a:b]) for a, b in spans])
        assert merged.gaps == ()
        assert (merged.start, merged.end) == (0, len(text))
        assert merged.text == text


class SpanList:
    """A span splitter that returns fixed spans (drawn by hypothesis) for one text."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        return self.spans


@st.composite
def corpus(draw: st.DrawFn, *, overlap: bool) -> dict[str, tuple[str, list[tuple[int, int]]]]:
    """1-3 sources, each with a leaf chunking (tiled by build_tree)."""
    out = {}
    for i in range(draw(st.integers(1, 3))):
        text = draw(st.text(ALPHABET, min_size=40 if overlap else 1, max_size=150))
        n = len(text)
        n_cuts = 40 if overlap else 15
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=n_cuts))) - {n})
        bounds = [0, *cuts, n]
        extra = st.integers(0, 40) if overlap else st.just(0)
        spans = [(a, min(n, b + draw(extra))) for a, b in pairwise(bounds)]
        out[f"src-{i}/é"] = (text, spans)
    return out


def build_nodes(sources: dict[str, tuple[str, list[tuple[int, int]]]]):
    """Leaves (junk ones too: any leaf can seed a window) and the node store of a corpus."""
    leaves, nodes = [], {}
    for sid, (text, spans) in sources.items():
        (source,) = identify([Document(page_content=text)], [sid], [], "")
        prepared = prepare(source, [Level("sentence", SpanList(spans))])
        leaves += [doc for _, doc in prepared.nodes if doc.metadata["level"] == "sentence"]
        nodes.update(prepared.nodes)
    return leaves, nodes


@st.composite
def window_case(draw: st.DrawFn, *, overlap: bool = False, deletions: bool = False):
    sources = draw(corpus(overlap=overlap))
    leaves, nodes = build_nodes(sources)
    chosen = draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=8))
    hits = [
        hit_from_metadata(leaf.metadata, leaf.page_content, draw(st.floats(0, 1)), leaf.id)
        for leaf in chosen
    ]
    sizes = st.integers(0, 1) if overlap else st.integers(0, 3)
    before, after = draw(sizes), draw(sizes)
    if deletions:
        hit_keys = {hit.key for hit in hits}
        deletable = sorted(k for k in nodes if k not in hit_keys and "/sentence/" in k)
        gone = draw(st.sets(st.sampled_from(deletable))) if deletable else set()
        nodes = {k: v for k, v in nodes.items() if k not in gone}
    return sources, hits, before, after, nodes


def check_windows(sources, hits, windows):
    texts = {sid: text for sid, (text, _) in sources.items()}
    for doc in windows:
        meta = doc.metadata
        assert doc.page_content == texts[meta["source_id"]][meta["start"] : meta["end"]]
        for match in meta["matches"]:
            assert meta["start"] <= match["start"] <= match["end"] <= meta["end"]
    # Every hit is inside exactly one window (one that shares nothing with the query, score
    # 0, is a match only of the window it seeded).
    counted = defaultdict(int)
    for doc in windows:
        for match in doc.metadata["matches"]:
            counted[match["key"]] += 1
    best = {hit.key: max(h.score for h in hits if h.key == hit.key) for hit in hits}
    assert {k: n for k, n in counted.items() if best[k] > 0} == {
        k: 1 for k, score in best.items() if score > 0
    }
    assert all(n == 1 for n in counted.values())


def assert_disjoint(windows):
    """Windows of one source never share a character."""
    by_source = defaultdict(list)
    for doc in windows:
        by_source[doc.metadata["source_id"]].append((doc.metadata["start"], doc.metadata["end"]))
    for spans in by_source.values():
        spans.sort()
        for (_, end), (start, _) in pairwise(spans):
            assert end <= start, spans


def assert_split_disjoint(windows):
    """Windows of one source never share a split (overlapping chunks may share characters)."""
    seen = defaultdict(set)
    for doc in windows:
        splits = set(doc.metadata["split_ids"])
        assert not seen[doc.metadata["source_id"]] & splits
        seen[doc.metadata["source_id"]] |= splits


def plan_and_assemble(hits, before, after, nodes):
    groups = plan_windows(dedupe_hits(hits), before, after, coalesce=True)
    return [doc for group in groups for doc in assemble_windows(group, nodes)]


class TestPlanWindows:
    @PROPERTY
    @given(case=window_case())
    def test_coalesced_windows_are_exact_and_disjoint(self, case):
        sources, hits, before, after, nodes = case
        windows = plan_and_assemble(hits, before, after, nodes)
        check_windows(sources, hits, windows)
        assert_disjoint(windows)
        for doc in windows:
            assert doc.metadata["missing_split_ids"] == []
            assert doc.metadata["gaps"] == []

    @PROPERTY
    @given(case=window_case(deletions=True))
    def test_missing_neighbours_end_windows_and_are_reported(self, case):
        sources, hits, before, after, nodes = case
        windows = plan_and_assemble(hits, before, after, nodes)
        check_windows(sources, hits, windows)
        assert_disjoint(windows)
        for doc in windows:
            meta = doc.metadata
            assert not set(meta["split_ids"]) & set(meta["missing_split_ids"])
            for split in meta["split_ids"]:
                key = next(h.source_key for h in hits if h.source_id == meta["source_id"])
                assert f"{key}/sentence/{split}" in nodes or split in {
                    m["split_id"] for m in meta["matches"]
                }

    @PROPERTY
    @given(case=window_case(overlap=True))
    def test_overlapping_chunks_merge_exactly(self, case):
        sources, hits, before, after, nodes = case
        windows = plan_and_assemble(hits, before, after, nodes)
        check_windows(sources, hits, windows)
        assert_split_disjoint(windows)
        scores = [doc.metadata["score"] for doc in windows]
        assert scores == sorted(scores, reverse=True)

    @PROPERTY
    @given(
        case=window_case(),
        coalesce=st.booleans(),
        limit=st.sampled_from([None, 0, 1, 2, 3]),
    )
    def test_placed_windows_are_planned_windows_from_keys_and_scores(self, case, coalesce, limit):
        """Issue 34: :func:`place_windows` plans from unread hits (keys and scores only); the
        hits at its positions are exactly the planned windows' seeds and matches, each once,
        and its windows, built from the read hits, are :func:`plan_windows`'s."""
        _, hits, before, after, _ = case
        read = dedupe_hits(hits)
        unread = [Scored(h.key, h.score, h.source_key, h.split_id) for h in read]
        placed = place_windows(unread, before, after, coalesce=coalesce, limit=limit)
        planned = plan_windows(read, before, after, coalesce=coalesce, limit=limit)
        assert placed.groups(read) == planned
        assert len(set(placed.positions)) == len(placed.positions)
        assert sorted(read[i].key for i in placed.positions) == sorted(
            h.key for group in planned for h in group.hits
        )

    @PROPERTY
    @given(case=window_case(), coalesce=st.booleans(), limit=st.sampled_from([0, 1, 2, 3]))
    def test_k_windows_are_the_first_k_windows_with_all_their_matches(self, case, coalesce, limit):
        """The first ``k`` windows of the whole plan, each with every match it holds, whether
        the plan stops at ``k`` or not (once ``k`` are placed, the hits left are scanned by
        source for matches only: the whole plan never takes that path)."""
        _, hits, before, after, _ = case
        read = dedupe_hits(hits)
        every = plan_windows(read, before, after, coalesce=coalesce)
        assert plan_windows(read, before, after, coalesce=coalesce, limit=limit) == every[:limit]

    def test_windows_of_overlapping_chunks_stay_k_results(self):
        """Two hits whose chunks overlap by characters but not by split stay two results
        (merging them would return fewer than k and let a weaker hit widen a window)."""
        text = "abcdefghijklmnopqrstuvwxyz"
        spans = [(i, min(26, i + 10)) for i in range(0, 26, 2)]  # chunk 0 overlaps chunk 4
        sources = {"s": (text, spans)}
        leaves, nodes = build_nodes(sources)
        hits = [hit_from_metadata(leaf.metadata, leaf.page_content, 1.0) for leaf in leaves[:5:4]]
        windows = plan_and_assemble(hits, 0, 0, nodes)
        assert [(d.metadata["start"], d.metadata["end"]) for d in windows] == [(0, 10), (8, 18)]
        assert [d.page_content for d in windows] == [text[0:10], text[8:18]]
        assert [d.metadata["split_ids"] for d in windows] == [[0], [4]]


# The stand-alone expander over random overlapping chunkings ------------------


class SpanTextSplitter(TextSplitter):
    """A TextSplitter that returns drawn spans' text (any overlap)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        super().__init__(chunk_size=10**6, chunk_overlap=0)
        self.spans = spans

    def split_text(self, text: str) -> list[str]:
        return [text[a:b] for a, b in self.spans]


@st.composite
def expander_case(draw: st.DrawFn):
    text, spans = draw(covering_chunking())
    spans = sorted(set(spans), key=lambda s: (s[0], -s[1]))
    spans = [s for s in spans if s[1] > s[0]]
    store = InMemoryStore()
    splitter = WindowSplitter(SpanTextSplitter(spans), store)
    chunks = splitter.split_documents([Document(page_content=text, id="doc")])
    retrieved = draw(st.lists(st.sampled_from(chunks), min_size=1, max_size=5))
    keep = {c.id for c in retrieved}
    deletable = [c.id for c in chunks if c.id not in keep]
    gone = draw(st.sets(st.sampled_from(deletable))) if deletable else set()
    store.mdelete(list(gone))
    return text, chunks, retrieved, gone, draw(st.integers(0, 4)), splitter


class TestExpanderProperties:
    @PROPERTY
    @given(case=expander_case())
    def test_windows_are_exact_slices_and_stop_at_gaps(self, case):
        text, chunks, retrieved, gone, size, splitter = case
        windows = splitter.expander(window_size=size).invoke(retrieved)
        assert len(windows) == len(retrieved)
        deleted = {int(key.rsplit("/", 1)[1]) for key in gone}
        for hit, window in zip(retrieved, windows, strict=True):
            meta = window.metadata
            gaps = [tuple(g) for g in meta["gaps"]]
            expected = slice_with_gaps(text, meta["start"], meta["end"], gaps)
            assert window.page_content == expected
            ids = meta["split_ids"]
            assert ids == list(range(ids[0], ids[-1] + 1))
            assert hit.metadata["split_id"] in ids
            assert not deleted & set(ids)
            lo = max(0, hit.metadata["split_id"] - size)
            hi = min(len(chunks) - 1, hit.metadata["split_id"] + size)
            assert meta["missing_split_ids"] == sorted(deleted & set(range(lo, hi + 1)))
            if not meta["missing_split_ids"]:
                assert ids == list(range(lo, hi + 1))


# Through the retriever: tests/unit_tests/test_reference_modes.py compares every mode, on
# random corpora and settings, with the exact answer of tests/reference.py.


@pytest.mark.parametrize("seed", range(3))
def test_shuffled_chunks_merge_like_sorted_ones(seed):
    """Input order never changes the merge (a fixed-seed sanity check beside the properties)."""
    rng = random.Random(seed)
    text = "The bird sings. The dog barks. The cat sleeps."
    spans = [(0, 15), (4, 8), (4, 8), (12, 30), (16, 30), (31, len(text))]
    chunks = [Chunk(a, b, text[a:b]) for a, b in spans]
    expected = merge_chunks(chunks)
    rng.shuffle(chunks)
    assert merge_chunks(chunks) == expected
    assert expected.text == text[:30] + " " + text[31:]
