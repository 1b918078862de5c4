"""A reached ceiling reads its leaves in runs (issue 34): ``ReadRuns``.

The leaves a ceiling reads around its hits come as runs of consecutive split
ids, ``(key prefix, lo, hi)``. A run's answer is what ``ReadLeaves`` of its
keys gives; ``NodeStore`` reads it from slices of its columns (no key made or
parsed per leaf), any other store by one ``mget``. The reference is
``ReadLeaves`` of the same keys, itself checked against the stored documents
(``test_columns.py``).
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
from langchain_s2b.core.merge import Chunk
from langchain_s2b.core.requests import ReadLeaves, ReadRuns, Request
from langchain_s2b.retriever import _private
from langchain_s2b.store.nodes.node_store import NodeStore
from langchain_s2b.store.runner import Runner, drive

from ._embeddings import BagOfWords
from .test_columns import node_batches
from .test_text_hits import WORDS
from .test_text_hits import _sources as _fruit_sources

PREFIXES = ["s/sentence/", "t.g2/sentence/"] * 4 + [
    "s/doc/",
    "t.g2/doc/",
    "s/sentence",
    "x/y/",
    "/",
]
"""Mostly the prefixes the batches write leaves under (so a run meets their own texts)."""


class TestNodeStoreRuns:
    @settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
    @given(batches=st.lists(node_batches(), min_size=1, max_size=3), data=st.data())
    def test_a_run_reads_as_its_keys_read(self, batches: list[Any], data: st.DataObject) -> None:
        store = NodeStore()
        for pairs in batches:
            store.mset(pairs)
            if data.draw(st.booleans()):
                keys = sorted(store.yield_keys())
                store.mdelete(data.draw(st.lists(st.sampled_from(keys), unique=True)))
        runs = data.draw(
            st.lists(
                st.tuples(st.sampled_from(PREFIXES), st.integers(-2, 7), st.integers(-2, 7)),
                max_size=8,
            )
        )
        got = store.read_runs(runs)
        want = [store.read_leaves([f"{p}{i}" for i in range(lo, hi + 1)]) for p, lo, hi in runs]
        assert got == want
        for mine, theirs in zip(got, want, strict=True):  # a Chunk is a tuple: the same type too
            assert [type(x) for x in mine] == [type(x) for x in theirs]

    def test_worked_by_hand(self) -> None:
        store = NodeStore()
        text = "One. Two. Three."
        doc = {"source_key": "s", "level": "doc", "split_id": 0, "start": 0, "end": 16}
        pairs = [("s/doc/0", Document(text, metadata=doc, id="s/doc/0"))]
        for i, (a, b) in enumerate([(0, 5), (5, 10), (10, 16)]):
            meta = {"source_key": "s", "level": "sentence", "split_id": i, "start": a, "end": b}
            pairs.append(
                (f"s/sentence/{i}", Document(text[a:b], metadata=meta, id=f"s/sentence/{i}"))
            )
        other = {"source_key": "t", "level": "sentence", "split_id": 1, "start": 5, "end": 10}
        pairs[2] = ("s/sentence/1", Document("Two. ", metadata=other, id="s/sentence/1"))
        own = pairs[3][1].model_copy(update={"page_content": "3hree."})  # not its slice
        pairs[3] = ("s/sentence/2", own)
        store.mset(pairs)
        assert store.read_runs([("s/sentence/", 0, 4), ("s/sentence/", 2, 1)]) == [
            [
                Chunk(0, 5, "One. ", 0),
                Document("Two. ", metadata=other, id="s/sentence/1"),  # names another source
                Chunk(10, 16, "3hree.", 2),  # its own text
                None,
                None,
            ],
            [],
        ]


def _retriever(mode: str, store: Any = None) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=FaissIndex(BagOfWords()),
        docstore=store if store is not None else NodeStore(),
        mode=mode,
        hybrid=True,
    )
    retriever.add_documents(_fruit_sources(8))
    retriever.delete(["s03"])
    return retriever


def _asked(
    retriever: SmallToBigRetriever, query: str, runs: bool, **overrides: Any
) -> tuple[list[Document], list[type]]:
    """``invoke``'s documents and the requests asked; ``runs=False``: every run read as
    ``ReadLeaves`` of its keys (the reference)."""
    io, op = retriever._retrieval(query, overrides)
    asked: list[type] = []

    def run(request: Request[Any]) -> Any:
        asked.append(type(request))
        if isinstance(request, ReadRuns) and not runs:
            return request.by_run(io.run(ReadLeaves(request.keys())))
        return io.run(request)

    return drive(op, run), asked


class TestCeilingsReadRuns:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        mode=st.sampled_from(["parent", "window", "multilevel"]),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        budget=st.integers(8, 200),
        k=st.sampled_from([None, 1, 3]),
    )
    def test_the_documents_are_the_keys_reads(
        self, mode: str, words: list[str], budget: int, k: int | None
    ) -> None:
        retriever = _retriever(mode)
        query = " ".join(words)
        got, asked = _asked(retriever, query, True, max_tokens=budget, k=k)
        want, reference = _asked(retriever, query, False, max_tokens=budget, k=k)
        assert [(d.page_content, d.metadata) for d in got] == [
            (d.page_content, d.metadata) for d in want
        ]
        assert asked == reference
        # the leaves around the hits come in runs (a window's own leaves are read first)
        assert asked.count(ReadLeaves) <= (mode == "window")

    def test_a_reached_ceiling_asks_runs(self) -> None:
        retriever = _retriever("parent")
        got, asked = _asked(retriever, "plum fig kiwi", True, max_tokens=20)
        assert got
        assert ReadRuns in asked

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_any_other_store_is_asked_one_mget(self, mode: str) -> None:
        retriever = _retriever(mode, store=InMemoryStore())
        reference = _retriever(mode)
        for query in ("pear peach", "olive part 2", "date lime"):
            got = retriever.invoke(query, max_tokens=30)
            assert got
            assert got == reference.invoke(query, max_tokens=30)

    def test_the_runner_answers_runs_by_mget_for_any_other_store(self) -> None:
        retriever = _retriever("window", store=InMemoryStore())
        io: Runner = _private(retriever)["_io"]
        store = retriever.docstore
        runs = [("s00/sentence/", 0, 2), ("s01/sentence/", 4, 7), ("s00/sentence/", 3, 2)]
        want = [store.mget([f"{p}{i}" for i in range(lo, hi + 1)]) for p, lo, hi in runs]
        assert io.run(ReadRuns(runs)) == want
        assert asyncio.run(io.arun(ReadRuns(runs))) == want
        assert want[1][-1] is None  # s01 has six sentences
        assert want[2] == []

    def test_a_batch_reads_every_query_s_runs_at_once(self) -> None:
        retriever = _retriever("parent")
        queries = ["apple", "quince fig", "lime part 3"]
        got = retriever.batch(queries, max_tokens=25)
        assert all(got)
        assert got == [retriever.invoke(q, max_tokens=25) for q in queries]
        a, b = ReadRuns([("s/x/", 0, 1)]), ReadRuns([("t/x/", 2, 3), ("u/x/", 0, 0)])
        one, split = combine([a, b])
        assert one == ReadRuns([*a.runs, *b.runs])
        answer: list[Any] = [["a", "b"], ["c", None], ["d"]]
        assert split(answer) == [answer[:1], answer[1:]]
