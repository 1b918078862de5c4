"""Hybrid child search: z-score fusion (pure) and the tantivy lexical index (files)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.fusion import fuse, fuse_arrays, z_fuse, z_scores
from langchain_s2b.core.hits import Scored, dedupe_hits
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.ranking import ranked as rank
from langchain_s2b.core.relevance import scale_of
from langchain_s2b.core.requests import Search, ask
from langchain_s2b.store.children.hybrid_index import HybridChildIndex
from langchain_s2b.store.lexical.analyzer import query_terms
from langchain_s2b.store.lexical.lexical_index import LexicalIndex
from langchain_s2b.store.lexical.top import FirstDepth

from ._embeddings import BagOfWords

SCORE = st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 2.0])  # few values: many ties
KEYS = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8)
REAL = st.floats(-1e6, 1e6, allow_nan=False)


class TestFusion:
    @given(keys=KEYS, data=st.data(), weight=st.sampled_from([0.0, 0.3, 1.0]))
    def test_fuse_matches_the_definition(
        self, keys: list[str], data: st.DataObject, weight: float
    ) -> None:
        """Issue 34 rewrote the sort: the same keys, scores and tie order as the definition."""
        dense = {key: data.draw(SCORE) for key in keys}
        lexical = [(k, data.draw(SCORE)) for k in data.draw(KEYS)]
        zl = dict(zip([k for k, _ in lexical], z_scores([s for _, s in lexical]), strict=True))
        low = min(zl.values(), default=0.0)
        place = {key: i for i, key in enumerate(dense)}
        expected = sorted(
            ((k, z + weight * zl.get(k, low)) for k, z in dense.items()),
            key=lambda pair: (-pair[1], place[pair[0]]),
        )
        assert fuse(dense, lexical, weight) == expected

    @given(
        dense=st.lists(REAL, max_size=30),
        lexical=st.lists(REAL, max_size=30),
        weight=st.floats(0, 10),
    )
    def test_fuse_arrays_gives_the_floats_of_one_addition_at_a_time(
        self, dense: list[float], lexical: list[float], weight: float
    ) -> None:
        """Issue 34: numpy's arrays, the floats and order of adding key by key in Python."""
        keys = [f"k{i}" for i in range(len(dense))]
        lexical_z = {f"k{i}": z for i, z in enumerate(lexical)}  # some keys missing, some extra
        floor = min(lexical_z.values(), default=0.0)
        fused = [z + weight * lexical_z.get(k, floor) for k, z in zip(keys, dense, strict=True)]
        order = sorted(range(len(keys)), key=fused.__getitem__, reverse=True)
        got = fuse_arrays(keys, np.array(dense, dtype=np.float64), lexical_z, weight)
        assert (got[0], [x.hex() for x in got[1]]) == (
            [keys[i] for i in order],
            [fused[i].hex() for i in order],
        )

    @given(scores=st.lists(REAL, min_size=1, max_size=40))
    def test_z_array_gives_the_floats_of_zs(self, scores: list[float]) -> None:
        scale = scale_of(scores)
        got = scale.z_array(np.array(scores, dtype=np.float64)).tolist()
        assert [x.hex() for x in got] == [x.hex() for x in scale.zs(scores)]

    @given(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "a.g2", "b.g1"]), st.integers(0, 3), SCORE),
            max_size=12,
        )
    )
    def test_dedupe_keeps_each_best_and_orders_ties_by_document(
        self, found: list[tuple[str, int, float]]
    ) -> None:
        hits = [Scored(f"{src}/s/{split}", score, src, split) for src, split, score in found]
        best: dict[str, Scored] = {}
        for hit in hits:
            if hit.key not in best or hit.score > best[hit.key].score:
                best[hit.key] = hit
        expected = sorted(
            best.values(), key=lambda h: (-h.score, h.source_key.split(".g")[0], h.split_id)
        )
        assert dedupe_hits(hits) == expected

    def test_z_scores(self) -> None:
        assert z_scores([1.0, 3.0]) == [-1.0, 1.0]
        assert z_scores([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
        assert z_scores([5.0]) == [0.0]
        assert z_scores([]) == []

    def test_union_with_missing_scores_at_the_list_minimum(self) -> None:
        # dense z: a +1.2247, b 0, c -1.2247; lexical z: c +1, d -1 (d missing from dense).
        dense = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
        lexical = [("c", 12.0), ("d", 2.0)]
        fused = dict(z_fuse(dense, lexical, weight=0.5))
        r = math.sqrt(1.5)
        assert fused == pytest.approx({"a": r - 0.5, "b": -0.5, "c": -r + 0.5, "d": -r - 0.5})
        assert [k for k, _ in z_fuse(dense, lexical, weight=0.5)] == ["a", "b", "c", "d"]

    def test_a_strong_lexical_match_overtakes(self) -> None:
        dense = [("a", 0.90), ("b", 0.89), ("c", 0.10)]
        lexical = [("b", 30.0), ("a", 1.0), ("c", 1.0)]
        assert [k for k, _ in z_fuse(dense, lexical, weight=0.3)] == ["b", "a", "c"]

    def test_weight_zero_keeps_dense_order_and_ties_keep_input_order(self) -> None:
        dense = [("a", 1.0), ("b", 1.0), ("c", 0.5)]
        assert [k for k, _ in z_fuse(dense, [("c", 9.0)], weight=0.0)] == ["a", "b", "c"]

    def test_empty_lexical_list_keeps_dense_ranking(self) -> None:
        dense = [("x", 0.2), ("y", 0.9)]
        assert [k for k, _ in z_fuse(dense, [])] == ["y", "x"]

    def test_negative_weight_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"lexical weight must be 0 or more; got -1"):
            z_fuse([], [], weight=-1)


def leaf(key: str, text: str) -> tuple[str, str, dict[str, object]]:
    return key, text, {"n": len(text)}


WORDS = ["rollo norse", "normandy france", "duke ruled", "walrus tusks", "rollo duke"]

CORPUS = [
    leaf("s/0", "The Normans were a people of Normandy in France."),
    leaf("s/1", "Rollo was their first ruler; Rollo signed a treaty."),
    leaf("s/2", "Normandy lies in the north of France."),
    leaf("s/3", ".."),
]


class _Searches:
    """A tantivy index whose searches (``n``) and stored-document reads (``docs``) are counted."""

    def __init__(self, index: Any) -> None:
        self.index, self.n, self.docs = index, 0, 0
        self.depths: list[int] = []

    def searcher(self) -> Any:
        return _CountedSearcher(self, self.index.searcher())

    def __getattr__(self, name: str) -> Any:  # writes go to the index itself
        return getattr(self.index, name)


class _CountedSearcher:
    def __init__(self, counts: _Searches, inner: Any) -> None:
        self.counts, self.inner = counts, inner

    def search(self, query: Any, limit: int) -> Any:
        self.counts.n += 1
        self.counts.depths.append(limit)
        return self.inner.search(query, limit)

    def doc(self, address: Any) -> Any:
        self.counts.docs += 1
        return self.inner.doc(address)

    def __getattr__(self, name: str) -> Any:  # the row column, uncounted
        return getattr(self.inner, name)


def _count_searches(index: LexicalIndex) -> _Searches:
    counting = _Searches(index._index)
    index._index = counting
    return counting


class TestLexicalIndex:
    def test_terms_split_like_the_index(self) -> None:
        assert query_terms("Who was ROLLO, the Norman_king? who") == [
            "who",
            "was",
            "rollo",
            "the",
            "norman",
            "king",
        ]

    def test_search_ranks_by_bm25_and_ignores_punctuation_only_queries(self) -> None:
        index = LexicalIndex()
        index.add(CORPUS)
        found = index.search("Rollo", 10)
        assert [k for k, _ in found] == ["s/1"]
        assert [k for k, _ in index.search("Normandy France", 10)] == ["s/2", "s/0"]
        assert index.entries()[0] == ("s/0", CORPUS[0][1], {"n": len(CORPUS[0][1])})
        assert index.search("?!", 10) == []
        assert len(index) == 4

    def test_add_replaces_and_delete_removes(self) -> None:
        index = LexicalIndex()
        index.add(CORPUS)
        index.add([leaf("s/1", "Nothing about the duke any more.")])
        index.delete(["s/0", "never-there"])
        assert index.keys() == {"s/1", "s/2", "s/3"}
        assert index.search("Rollo", 10) == []
        assert [k for k, _ in index.search("duke", 10)] == ["s/1"]

    def test_save_and_load_round_trip_without_touching_the_snapshot(self, tmp_path: Path) -> None:
        index = LexicalIndex()
        index.add(CORPUS)
        before = index.search("Normandy France", 10)
        written = index.save(tmp_path / "lex")
        saved = sorted(p.name for p in (tmp_path / "lex").iterdir())
        assert written == saved
        assert "meta.json" in saved
        loaded = LexicalIndex.load(tmp_path / "lex")
        assert loaded.search("Normandy France", 10) == before
        assert loaded.items() == index.items()
        loaded.delete(["s/2"])
        assert sorted(p.name for p in (tmp_path / "lex").iterdir()) == saved
        assert LexicalIndex.load(tmp_path / "lex").keys() == {"s/0", "s/1", "s/2", "s/3"}

    def test_equal_scores_at_the_cut_are_taken_by_key_not_by_tantivy(self) -> None:
        """Issue 33 (found by the wide-tie differential tests): 150 equal leaves, the 100
        best are the first 100 keys, not the 100 tantivy happened to return first."""
        index = LexicalIndex()
        keys = [f"s/{i}" for i in range(150)]  # by key: s/0, s/1, s/10, s/100, ...
        index.add([leaf(key, "All rights reserved.") for key in keys])
        index.add([leaf("t/0", "Rights reserved, rights reserved.")])  # scores higher
        searches = _count_searches(index)
        found = index.search("rights reserved", 100)
        assert [k for k, _ in found] == ["t/0", *sorted(keys)[:99]]
        assert searches.depths == [126, 252]  # n + n // 4 + 1, tied at the cut; then all 151
        searches.depths = []
        assert index.search("rights reserved", 1) == [found[0]]
        assert searches.depths == [3]  # 2n + 1 once a tie reached past: the 1st above the 3rd
        kept = index.search("rights", 50, keep=lambda key, _: not key.endswith("0"))
        assert [k for k, _ in kept] == sorted(k for k in keys if not k.endswith("0"))[:50]

    def test_a_tie_wider_than_the_first_search_goes_deeper_and_reads_only_what_can_come_back(
        self,
    ) -> None:
        """Issue 34: 150 equal leaves under one better one, 10 asked: 13, 26, 52, 104, then
        208 deep (all 151 back); each leaf's key is read once, and a search whose cut is
        clean reads only the leaves above or at it, not the 2n + 1 it asked for (the first
        search goes that deep once a tie reached past n + n // 4 + 1)."""
        index = LexicalIndex()
        keys = [f"s/{i}" for i in range(150)]
        index.add([leaf(key, "All rights reserved.") for key in keys])
        index.add([leaf("t/0", "Rights reserved, rights reserved.")])
        counts = _count_searches(index)
        found = index.search("rights reserved", 10)
        assert [k for k, _ in found] == ["t/0", *sorted(keys)[:9]]
        assert (counts.depths, counts.docs) == ([13, 26, 52, 104, 208], 151)
        counts.depths, counts.docs = [], 0
        index.add([leaf(f"u/{i}", "Rights reserved, rights reserved.") for i in range(2)])
        assert [k for k, _ in index.search("rights reserved", 3)] == ["t/0", "u/0", "u/1"]
        assert (counts.depths, counts.docs) == ([7], 3)  # 2n + 1: the 3rd scores above the 7th

    def test_the_first_depth_follows_how_often_ties_reach_past_a_quarter_more(self) -> None:
        """Issue 34: n + n // 4 + 1 while ties rarely reach past it, 2n + 1 once they often do
        (a moving share over 5%: each such search adds a 16th of the gap to it)."""
        first = FirstDepth()
        tied = [(1.0, i) for i in range(252)]  # one group of equal scores, past 126
        clean = [(200.0 - i, i) for i in range(126)]
        assert first(100) == 126
        first.saw(clean, 100)
        assert first(100) == 126
        first.saw(tied, 100)  # a 16th: 0.0625
        assert first(100) == 201
        for _ in range(3):  # 0.0625 * (15 / 16) ** 3 = 0.0515
            first.saw(clean, 100)
        assert first(100) == 201
        first.saw(clean, 100)  # ** 4 = 0.0483
        assert [first(100), first(10)] == [126, 13]
        first.saw([(1.0, i) for i in range(13)], 10)  # all 13 tied at the cut: past it
        assert first(10) == 21
        first.saw([(1.0, i) for i in range(12)], 10)  # fewer than 13 match: nothing past
        share = 0.0
        for past in (0, 1, 0, 0, 0, 0, 1, 0):  # each search seen, by hand: 0.101, over 5%
            share += (past - share) / 16
        assert (first.share, first(10)) == (share, 21)

    @given(
        rounds=st.lists(
            st.lists(st.tuples(st.integers(0, 7), st.sampled_from(WORDS)), max_size=6),
            min_size=1,
            max_size=4,
        ),
        gone=st.lists(st.integers(0, 7), max_size=4),
        query=st.lists(st.sampled_from([w.split()[0] for w in WORDS]), min_size=1, max_size=3),
        n=st.integers(1, 9),
    )
    def test_keys_read_from_the_row_column_are_the_stored_keys(
        self, rounds: list[list[tuple[int, str]]], gone: list[int], query: list[str], n: int
    ) -> None:
        """Issue 34: an index that keeps rows answers from its row column, as from its keys."""
        rows_kept, plain = LexicalIndex(rows=True), LexicalIndex()
        row_of: dict[str, int] = {}
        next_row = 0
        for batch in rounds:
            entries = [leaf(f"s/{i}", text) for i, text in dict(batch).items()]
            rows = list(range(next_row, next_row + len(entries)))
            next_row += len(entries)
            rows_kept.add(entries, rows)
            plain.add(entries)
            row_of.update((key, row) for (key, _, _), row in zip(entries, rows, strict=True))
        dropped = [f"s/{i}" for i in gone]
        rows_kept.delete(dropped)
        plain.delete(dropped)
        for key in dropped:
            row_of.pop(key, None)
        assert rows_kept.key_rows() == row_of
        key_at = {row: key for key, row in row_of.items()}
        words = " ".join(query)
        counts = _count_searches(rows_kept)
        found = rows_kept.search(words, n, key_of=lambda rs: [key_at.get(r) for r in rs])
        assert counts.docs == 0  # every key from the row column: no stored document read
        assert found == plain.search(words, n) == rows_kept.search(words, n)
        unknown = rows_kept.search(words, n, key_of=lambda rs: [None] * len(rs))
        assert unknown == found  # a row the caller does not know: its stored key is read

    def test_an_index_that_keeps_rows_needs_one_per_leaf(self, tmp_path: Path) -> None:
        index = LexicalIndex(rows=True)
        with pytest.raises(ValueError, match=r"^This lexical index keeps rows: add\(\) needs 2"):
            index.add(CORPUS[:2])
        with pytest.raises(ValueError, match="needs 2 rows; got 1"):
            index.add(CORPUS[:2], [0])
        index.add(CORPUS, [5, 6, 7, 8])
        index.save(tmp_path / "lex")
        loaded = LexicalIndex.load(tmp_path / "lex")
        assert loaded.rows
        assert loaded.key_rows() == {"s/0": 5, "s/1": 6, "s/2": 7, "s/3": 8}
        old = LexicalIndex()  # a save without rows (before issue 34) loads as one without
        old.add(CORPUS)
        old.save(tmp_path / "old")
        assert not LexicalIndex.load(tmp_path / "old").rows
        assert LexicalIndex.load(tmp_path / "old").key_rows() == dict.fromkeys(old.keys())

    def test_text_that_is_not_valid_unicode_is_indexed(self) -> None:
        index = LexicalIndex()
        index.add([leaf("s/9", "bad \ud800 surrogate")])
        assert [k for k, _ in index.search("surrogate \udfff", 5)] == ["s/9"]

    def test_load_of_a_directory_without_an_index_is_named(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="holds no lexical index"):
            LexicalIndex.load(tmp_path)


# Through the retriever: updated, deleted and saved with the child index --------------

TEXT = "Rollo led the Norse. Normandy is in France. The duke ruled. Walrus tusks are long."


def _hybrid(**fields: object) -> SmallToBigRetriever:
    return SmallToBigRetriever.from_documents(
        [Document(page_content=TEXT, id="d")], BagOfWords(), mode="window", **fields
    )


_KEYS = {f"d/sentence/{i}" for i in range(4)}
TEXT_SENTENCES = ["Rollo led the Norse.", "Normandy is in France.", "The duke ruled.",
                  "Walrus tusks are long."]  # fmt: skip


def _lexical(retriever: SmallToBigRetriever) -> LexicalIndex:
    index = retriever._io.index
    assert isinstance(index, HybridChildIndex)
    return index.lexical


class TestWithTheRetriever:
    def test_update_and_delete_reach_the_lexical_index(self) -> None:
        retriever = _hybrid()
        assert [k for k, _ in _lexical(retriever).search("walrus", 5)] == ["d/sentence/3"]
        retriever.add_documents([Document(page_content="Only penguins now.", id="d")])
        lexical = _lexical(retriever)
        assert lexical.search("walrus", 5) == []
        assert lexical.keys() == {"d.g1/sentence/0"}  # a FaissIndex's keeps keys, not text
        assert [k for k, _ in lexical.search("penguins", 5)] == ["d.g1/sentence/0"]
        retriever.delete(["d"])
        assert len(lexical) == 0

    def test_save_and_load_keep_the_lexical_index(self, tmp_path: Path) -> None:
        retriever = _hybrid()
        retriever.save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", BagOfWords())
        assert _lexical(loaded).keys() == _lexical(retriever).keys() == _KEYS
        for word in ("walrus", "duke", "norse", "france"):
            assert _lexical(loaded).search(word, 5) == _lexical(retriever).search(word, 5)
        query = "walrus duke"
        assert loaded.invoke(query, max_tokens=10) == retriever.invoke(query, max_tokens=10)

    def test_a_save_without_one_is_built_from_the_child_index(self, tmp_path: Path) -> None:
        _hybrid(hybrid=False).save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", BagOfWords(), hybrid=False)
        assert isinstance(loaded.vectorstore, FaissIndex)
        assert loaded.vectorstore.built_lexical() is None
        hybrid = loaded.model_copy(update={"hybrid": True})  # built when a hybrid one opens
        assert _lexical(hybrid).keys() == _KEYS
        (doc,) = hybrid.invoke("walrus", max_tokens=6)
        assert doc.page_content == "Walrus tusks are long."

    def test_an_index_filled_elsewhere_is_caught_up_before_a_write(self) -> None:
        built = _hybrid(hybrid=False)
        retriever = SmallToBigRetriever(
            vectorstore=built.vectorstore, docstore=built.docstore, mode="window"
        )
        retriever.add_documents([Document(page_content="Penguins swim.", id="p")])
        assert _lexical(retriever).keys() == {*_KEYS, "p/sentence/0"}

    def test_each_leaf_is_kept_with_its_row_through_writes(self) -> None:
        """Issue 34: BM25's hits are read from the row column, so each row must be its leaf's."""
        retriever = _hybrid()
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        retriever.add_documents([Document(page_content="Penguins swim. Walrus too.", id="p")])
        retriever.add_documents([Document(page_content="Only penguins now.", id="d")])
        retriever.delete(["p"])
        pairs = _lexical(retriever).key_rows()
        assert pairs == {"d.g1/sentence/0": store.rows_of(["d.g1/sentence/0"])[0]}
        assert store.search_text("penguins", 5, None) == _lexical(retriever).search("penguins", 5)

    def test_verify_finds_a_leaf_kept_with_another_row_and_repair_rebuilds(self) -> None:
        retriever = _hybrid()
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        key = "d/sentence/3"
        (row,) = store.rows_of([key])
        _lexical(retriever).add([leaf(key, "Walrus tusks are long.")], [row + 100])
        report = retriever.verify()
        assert report.lexical_missing == [key]
        assert not report.lexical_orphans
        retriever.verify(repair=True)
        assert retriever.verify().ok
        keys = sorted(_KEYS)
        assert _lexical(retriever).key_rows() == dict(zip(keys, store.rows_of(keys), strict=True))

    def test_a_lexical_index_without_rows_or_with_rows_numbered_again(self) -> None:
        """One saved before issue 34 (no row column) is used, read by stored key; one whose
        rows were numbered again at load is not used (built again from the records)."""
        retriever = _hybrid()
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        words = ("walrus", "duke", "norse france")
        want = {word: store.search_text(word, 5, None) for word in words}
        old = LexicalIndex.scratch()  # keys only, no rows
        old.add([leaf(key, text) for key, text in zip(sorted(_KEYS), TEXT_SENTENCES, strict=True)])
        store._lexical = None
        store.adopt_lexical(old)
        assert store.built_lexical() is old
        assert {word: store.search_text(word, 5, None) for word in words} == want
        with_rows = LexicalIndex.scratch(rows=True)
        with_rows.add([leaf(k, "x") for k in sorted(_KEYS)], [7, 8, 9, 10])  # not these rows
        store._lexical = None
        with pytest.raises(
            ValueError, match=r"row column \(count, min, max, sum \(4, 7, 10, 34\)\)"
        ):
            store.adopt_lexical(with_rows)  # a damaged save: its hits would name other leaves
        store._renumbered = True
        store.adopt_lexical(with_rows)
        assert store.built_lexical() is None  # built from the records on first use
        assert {word: store.search_text(word, 5, None) for word in words} == want

    def test_one_without_rows_is_saved_with_them(self, tmp_path: Path) -> None:
        """A lexical index saved before issue 34 (no row column) is written with rows by the
        next save: built again from the records, so the next load reads keys by row."""
        retriever = _hybrid()
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        words = ("walrus", "duke", "norse france", "rollo")
        want = {word: store.search_text(word, 5, None) for word in words}
        query = "walrus duke"
        answer = retriever.invoke(query, max_tokens=10)
        old = LexicalIndex.scratch()  # keys only, no rows
        old.add([leaf(key, text) for key, text in zip(sorted(_KEYS), TEXT_SENTENCES, strict=True)])
        store._lexical = None
        store.adopt_lexical(old)
        retriever.save(tmp_path / "old")  # the first save after it
        upgraded = store.built_lexical()
        assert upgraded is not None
        assert upgraded is not old
        assert upgraded.rows
        keys = sorted(_KEYS)
        assert upgraded.key_rows() == dict(zip(keys, store.rows_of(keys), strict=True))
        loaded = SmallToBigRetriever.load(tmp_path / "old", BagOfWords())
        assert isinstance(loaded.vectorstore, FaissIndex)
        lexical = loaded.vectorstore.built_lexical()
        assert lexical is not None
        assert lexical.rows
        assert {word: loaded.vectorstore.search_text(word, 5, None) for word in words} == want
        assert loaded.invoke(query, max_tokens=10) == answer
        retriever.save(tmp_path / "again")
        assert store.built_lexical() is upgraded  # once: one with rows is saved as it is

    def test_a_failed_upgrade_keeps_the_old_index_and_the_old_save(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        retriever = _hybrid()
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        retriever.save(tmp_path / "idx")
        answer = retriever.invoke("walrus duke", max_tokens=10)
        old = LexicalIndex.scratch()
        old.add([leaf(key, text) for key, text in zip(sorted(_KEYS), TEXT_SENTENCES, strict=True)])
        store._lexical = None
        store.adopt_lexical(old)

        def fail(self: FaissIndex) -> LexicalIndex:
            raise KeyboardInterrupt

        monkeypatch.setattr(FaissIndex, "_built_from_records", fail)
        with pytest.raises(KeyboardInterrupt):
            retriever.save(tmp_path / "idx")
        assert store.built_lexical() is old  # still served
        assert retriever.invoke("walrus duke", max_tokens=10) == answer
        loaded = SmallToBigRetriever.load(tmp_path / "idx", BagOfWords())
        assert loaded.invoke("walrus duke", max_tokens=10) == answer  # the previous save
        monkeypatch.undo()
        retriever.save(tmp_path / "idx")
        lexical = store.built_lexical()
        assert lexical is not None
        assert lexical.rows

    def test_hybrid_off_keeps_no_lexical_index(self) -> None:
        retriever = _hybrid(hybrid=False)
        assert not isinstance(retriever._io.index, HybridChildIndex)
        (doc,) = retriever.invoke("walrus", max_tokens=6)
        assert doc.page_content == "Walrus tusks are long."


_ARTICLES = [
    "Rollo led the Norse raiders. Normandy is in France. The duke ruled Normandy.",
    "Walrus tusks are long. The walrus lives in the Arctic. Norse traders sold tusks.",
    "France has many regions. The duke of Normandy crossed the sea. Raiders came by sea.",
]


@pytest.mark.parametrize("flt", [None, {"topic": "north"}, {"topic": "nowhere"}])
@pytest.mark.parametrize("query", ["walrus tusks", "duke of Normandy", "Norse raiders sea"])
def test_lexical_only_leaves_are_scored_by_the_child_index_with_their_cosine(
    flt: dict[str, str] | None, query: str
) -> None:
    """FAISS scores them from its stored vectors, another store by a search for exactly them:
    the same leaves, and each hit's score is the cosine a full search gives it (the order
    may differ where float32 and float64 cosines of near-ties differ)."""
    docs = [
        Document(page_content=text, id=f"a{i}", metadata={"topic": "north" if i else "west"})
        for i, text in enumerate(_ARTICLES)
    ]
    rankings = []
    for store in (FaissIndex(BagOfWords()), InMemoryVectorStore(BagOfWords())):
        retriever = SmallToBigRetriever(vectorstore=store, mode="window")
        retriever.add_documents(docs)
        io = retriever._io
        vector = io.index.embed_query(query)
        every = io.drive(ask(Search(vector, query, 100, flt)))
        cosine = {hit.key: hit.score for hit in every.hits}
        params = QueryParams(mode="window", filter=flt)  # 2 deep: most hits are lexical only
        ranked = io.drive(rank(query, vector, params, 2))
        assert {h.key: h.score for h in ranked.hits} == pytest.approx(
            {h.key: cosine[h.key] for h in ranked.hits}, abs=1e-6
        )
        rankings.append(sorted(h.key for h in ranked.hits))
    assert rankings[0] == rankings[1]
    # worked out by hand: the leaves holding a query word, in the filter's sources
    expected = {
        "walrus tusks": ["a1/sentence/0", "a1/sentence/1", "a1/sentence/2"],
        "duke of Normandy": ["a0/sentence/1", "a0/sentence/2", "a2/sentence/1"],
        "Norse raiders sea": ["a0/sentence/0", "a1/sentence/2", "a2/sentence/1", "a2/sentence/2"],
    }[query]
    if flt is not None:
        expected = [key for key in expected if flt["topic"] == "north" and key[:2] != "a0"]
    assert sorted(rankings[0]) == expected
