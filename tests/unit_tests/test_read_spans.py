"""A window read as one slice of its source (issue 34): ``ReadSpans``.

Window mode with no ceiling asks ``ReadSpans`` with each chosen window's run
of leaves; ``NodeStore`` answers a run whose leaves are held as slices of their
source with no gap between them as that slice (one read, no chunk per leaf),
and the core asks ``ReadLeaves`` only for the windows it did not answer. The
reference is the leaf path (every run answered ``None``), which every other
store, and any window with a missing leaf, a gap or a leaf of its own text,
takes: the documents must be the same, every field.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.batch import combine
from langchain_s2b.core.merge import SpanText
from langchain_s2b.core.requests import ReadLeaves, ReadSpans, Request
from langchain_s2b.retriever import _private
from langchain_s2b.store.nodes.node_store import NodeStore
from langchain_s2b.store.runner import Runner, drive

from ._embeddings import BagOfWords
from .test_text_hits import WORDS
from .test_text_hits import _sources as _fruit_sources


def _retriever(gone: list[int], hybrid: bool, store: Any = None) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=FaissIndex(BagOfWords()),
        docstore=store if store is not None else NodeStore(),
        mode="window",
        hybrid=hybrid,
    )
    retriever.add_documents(_fruit_sources(8))  # 48 sentences, 6 a source
    retriever.delete([f"s{i:02d}" for i in gone])
    return retriever


def _asked(
    retriever: SmallToBigRetriever, query: str, spans: bool, **overrides: Any
) -> tuple[list[Document], list[type]]:
    """``invoke``'s documents and the requests it asked; ``spans=False``: the reference,
    every run answered ``None`` (so the core reads every window's leaves)."""
    io, op = retriever._retrieval(query, overrides)
    asked: list[type] = []

    def run(request: Request[Any]) -> Any:
        asked.append(type(request))
        if isinstance(request, ReadSpans) and not spans:
            return [None] * len(request.spans)
        return io.run(request)

    return drive(op, run), asked


def _same(got: list[Document], want: list[Document]) -> None:
    assert [(d.page_content, d.metadata, d.id) for d in got] == [
        (d.page_content, d.metadata, d.id) for d in want
    ]
    assert [list(d.metadata) for d in got] == [list(d.metadata) for d in want]


class TestWindowsReadAsSlices:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        gone=st.lists(st.integers(0, 7), max_size=3, unique=True),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        k=st.integers(1, 6),
        window=st.integers(0, 3),
        coalesce=st.booleans(),
        hybrid=st.booleans(),
    )
    def test_the_documents_are_the_leaf_paths(
        self, gone: list[int], words: list[str], k: int, window: int, coalesce: bool, hybrid: bool
    ) -> None:
        retriever = _retriever(gone, hybrid)
        query = " ".join(words)
        more = {"k": k, "window_size": window, "coalesce": coalesce}
        got, asked = _asked(retriever, query, True, **more)
        want, reference = _asked(retriever, query, False, **more)
        _same(got, want)
        assert got, query  # the fruit sources share words with every query
        assert asked[-1] is ReadSpans  # every leaf a slice, no gap: each window one slice
        assert ReadLeaves not in asked
        assert reference == [*asked, ReadLeaves]  # the leaf path: nothing else changes
        assert retriever.invoke(query, **more) == got  # invoke takes the same path

    def test_a_window_with_a_gap_is_read_leaf_by_leaf(self) -> None:
        retriever = _retriever([], hybrid=False)
        store = retriever.docstore
        (leaf,) = store.mget(["s00/sentence/2"])
        assert leaf is not None
        start, end = leaf.metadata["start"] + 1, leaf.metadata["end"]  # one char left out
        (source,) = store.mget(["s00/doc/0"])
        assert source is not None
        moved = Document(
            source.page_content[start:end],
            metadata={**leaf.metadata, "start": start, "split_idx_start": start},
            id=leaf.id,
        )
        store.mset([("s00/sentence/2", moved)])
        query = source.page_content[start:end]
        got, asked = _asked(retriever, query, True, k=1, window_size=1)
        want, _ = _asked(retriever, query, False, k=1, window_size=1)
        _same(got, want)
        assert asked[-2:] == [ReadSpans, ReadLeaves]
        assert got[0].metadata["split_ids"] == [1, 2, 3]
        assert got[0].metadata["gaps"] == [(start - 1, start)]

    def test_a_ceiling_reads_leaves(self) -> None:
        retriever = _retriever([], hybrid=True)
        got, asked = _asked(retriever, "plum fig", True, k=2, max_tokens=10**6)
        assert ReadSpans not in asked
        assert ReadLeaves in asked
        plain, _ = _asked(retriever, "plum fig", True, k=2)
        _same(got, plain)

    def test_any_other_store_answers_none(self) -> None:
        retriever = _retriever([1], hybrid=True, store=InMemoryStore())
        reference = _retriever([1], hybrid=True)
        got, asked = _asked(retriever, "kiwi lime", True, k=3)
        want, _ = _asked(reference, "kiwi lime", False, k=3)
        _same(got, want)
        assert asked[-2:] == [ReadSpans, ReadLeaves]

    def test_async_is_sync(self) -> None:
        retriever = _retriever([2], hybrid=True)
        for query in ("pear peach", "olive part", "date"):
            _same(asyncio.run(retriever.ainvoke(query, k=3)), retriever.invoke(query, k=3))

    def test_a_batch_reads_every_query_s_runs_at_once(self) -> None:
        retriever = _retriever([], hybrid=False)
        queries = ["apple", "quince fig", "lime part 3"]
        got = retriever.batch(queries, k=2)
        for docs, query in zip(got, queries, strict=True):
            _same(docs, retriever.invoke(query, k=2))
        a, b = ReadSpans([("s/x/", 0, 1)]), ReadSpans([("t/x/", 2, 3), ("u/x/", 0, 0)])
        one, split = combine([a, b])
        assert one == ReadSpans([*a.spans, *b.spans])
        answer = [SpanText("a", 0, 1, {}), None, SpanText("c", 0, 1, {})]
        assert split(answer) == [answer[:1], answer[1:]]


class TestNodeStoreRuns:
    """Worked by hand: ``s`` is "One. Two. Three." with its three sentences as leaves."""

    TEXT = "One. Two. Three."
    SPANS = ((0, 5), (5, 10), (10, 16))

    def _store(self, spans: tuple[tuple[int, int], ...] = SPANS) -> NodeStore:
        store = NodeStore()
        doc = {"source_key": "s", "level": "doc", "split_id": 0, "start": 0, "end": 16}
        pairs = [("s/doc/0", Document(self.TEXT, metadata=doc, id="s/doc/0"))]
        for i, (a, b) in enumerate(spans):
            meta = {"source_key": "s", "level": "sentence", "split_id": i, "start": a, "end": b}
            key = f"s/sentence/{i}"
            pairs.append((key, Document(self.TEXT[a:b], metadata=meta, id=key)))
        store.mset(pairs)
        return store

    def test_a_run_is_its_slice(self) -> None:
        store = self._store()
        first = {"source_key": "s", "level": "sentence", "split_id": 1, "start": 5, "end": 10}
        assert store.read_spans([("s/sentence/", 1, 2), ("s/sentence/", 0, 0)]) == [
            SpanText("Two. Three.", 5, 16, first),
            SpanText("One. ", 0, 5, {**first, "split_id": 0, "start": 0, "end": 5}),
        ]

    @pytest.mark.parametrize(
        "run",
        [
            ("s/sentence/", 0, 3),  # leaf 3 is not there
            ("s/sentence/", 2, 1),  # an empty run
            ("s/sentence/", -1, 0),
            ("s/sentence", 0, 1),  # not a prefix
            ("s/paragraph/", 0, 0),  # no such level
            ("t/sentence/", 0, 0),  # no such source
        ],
    )
    def test_what_is_not_held_is_none(self, run: tuple[str, int, int]) -> None:
        assert self._store().read_spans([run]) == [None]

    def test_a_gap_an_empty_leaf_and_disorder_are_none(self) -> None:
        gap = self._store(((0, 4), (5, 10), (10, 16)))  # "One." then "Two. "
        assert gap.read_spans([("s/sentence/", 0, 1), ("s/sentence/", 1, 2)]) == [
            None,
            SpanText("Two. Three.", 5, 16, _meta(1, 5, 10)),
        ]
        empty = self._store(((0, 5), (5, 5), (5, 16)))
        assert empty.read_spans([("s/sentence/", 0, 2), ("s/sentence/", 2, 2)]) == [
            None,
            SpanText("Two. Three.", 5, 16, _meta(2, 5, 16)),
        ]
        disorder = self._store(((5, 10), (0, 5), (10, 16)))
        assert disorder.read_spans([("s/sentence/", 0, 1), ("s/sentence/", 1, 2)]) == [
            None,
            None,  # "One. " then "Three.": a gap
        ]
        overlap = self._store(((0, 9), (5, 16), (10, 16)))  # covered twice: still one slice
        assert overlap.read_spans([("s/sentence/", 0, 2)]) == [
            SpanText(self.TEXT, 0, 16, _meta(0, 0, 9))
        ]

    def test_a_leaf_of_its_own_text_is_none(self) -> None:
        store = self._store()
        meta = _meta(1, 5, 10)
        store.mset([("s/sentence/1", Document("2wo. ", metadata=meta, id="s/sentence/1"))])
        assert store.read_spans([("s/sentence/", 0, 1), ("s/sentence/", 2, 2)]) == [
            None,
            SpanText("Three.", 10, 16, _meta(2, 10, 16)),
        ]

    def test_a_leaf_naming_another_key_is_none(self) -> None:
        store = self._store()
        meta = {**_meta(1, 5, 10), "source_key": "t"}
        store.mset([("s/sentence/1", Document("Two. ", metadata=meta, id="s/sentence/1"))])
        assert store.read_spans([("s/sentence/", 1, 1)]) == [None]

    def test_a_saved_store_naming_a_node_twice_is_refused(self, tmp_path: Any) -> None:
        store = self._store()
        store.write(tmp_path)
        other = tmp_path / "nodes.other.jsonl"
        line = '"s/sentence/1"\t{"v":1,"id":"s/sentence/1","page_content":"x","metadata":{}}\n'
        other.write_text(other.read_text() + line)
        with pytest.raises(ValueError, match="'s/sentence/1', kept as given, is also a node in"):
            NodeStore.read(tmp_path)


def _meta(split: int, start: int, end: int) -> dict[str, Any]:
    return {"source_key": "s", "level": "sentence", "split_id": split, "start": start, "end": end}


def test_the_runner_answers_none_for_any_other_store() -> None:
    retriever = _retriever([], hybrid=False, store=InMemoryStore())
    io: Runner = _private(retriever)["_io"]
    assert io.run(ReadSpans([("s00/sentence/", 0, 1)])) == [None]
    assert asyncio.run(io.arun(ReadSpans([("s00/sentence/", 0, 1)]))) == [None]
