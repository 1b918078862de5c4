"""Parent mode end to end: k in parent space, spans, scores, stores, errors."""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any

import pytest
from langchain_community.vectorstores import FAISS
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryByteStore, InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import DocumentCodecStore, FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import size_splitter

from ._embeddings import BagOfWords

FRUIT = "Apples grow on apple trees. " * 6
OTHER = [
    "Bananas are yellow and sweet. An apple a day, they say. " * 3,
    "Cherries are small and red. Apple pie is also nice. " * 3,
    "Dates grow in the desert. Apple orchards need water. " * 3,
    "Elderberries make syrup. Nothing else here at all. " * 3,
]


def _doc() -> Document:
    text = "\n\n".join([FRUIT, *OTHER])
    return Document(page_content=text, id="fruit", metadata={"topic": "fruit"})


def _retriever(**fields: Any) -> SmallToBigRetriever:
    fields.setdefault("child_splitter", size_splitter(8))
    fields.setdefault("parent_splitter", size_splitter(45))
    return SmallToBigRetriever.from_documents([_doc()], BagOfWords(), **fields)


class TestParentMode:
    def test_k_counts_parents_not_children(self) -> None:
        retriever = _retriever(k=3, fetch_k=2)
        query = "Apples grow on apple trees."
        first_children = retriever.vectorstore.similarity_search(query, k=3)
        assert len({d.metadata["parent_id"] for d in first_children}) == 1
        docs = retriever.invoke(query)
        assert len(docs) == 3
        assert len({d.id for d in docs}) == 3

    def test_invoke_k_override_and_order(self) -> None:
        retriever = _retriever(k=4)
        one = retriever.invoke("apple", k=1)
        assert len(one) == 1
        docs = retriever.invoke("apple", k=4)
        scores = [d.metadata["score"] for d in docs]
        assert scores == sorted(scores, reverse=True)

    def test_metadata_contract(self) -> None:
        source = _doc().page_content
        for doc in _retriever().invoke("cherries red"):
            meta = doc.metadata
            assert meta["mode"] == "parent"
            assert meta["source_id"] == "fruit"
            assert meta["topic"] == "fruit"
            assert source[meta["start"] : meta["end"]] == doc.page_content
            assert meta["score"] == max(m["score"] for m in meta["matches"])
            for match in meta["matches"]:
                assert meta["start"] <= match["start"] < match["end"] <= meta["end"]

    def test_child_offsets_are_source_offsets(self) -> None:
        source = _doc().page_content
        retriever = _retriever()
        children = retriever.vectorstore.similarity_search("apple", k=50)
        assert len(children) > 10
        for child in children:
            meta = child.metadata
            assert source[meta["start"] : meta["end"]] == child.page_content
            assert meta["split_idx_start"] == meta["start"]

    def test_leaves_tile_the_source(self) -> None:
        retriever = _retriever()
        n = retriever.vectorstore.similarity_search("x", k=1)[0].metadata["source_splits"]
        leaves = retriever.docstore.mget([f"fruit/child/{i}" for i in range(n)])
        assert "".join(d.page_content for d in leaves if d) == _doc().page_content

    def test_filter_per_call(self) -> None:
        retriever = _retriever()
        retriever.add_documents(
            [Document(page_content="Apple apple apple.", id="b", metadata={"topic": "b"})]
        )
        docs = retriever.invoke("apple", k=5, filter={"topic": "b"})
        assert [d.metadata["source_id"] for d in docs] == ["b"]

    def test_unknown_option_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="Unknown retrieval option"):
            _retriever().invoke("apple", top_k=3)

    @pytest.mark.parametrize("k", [0, -1])
    def test_bad_k(self, k: int) -> None:
        with pytest.raises(ValueError, match="k must be at least 1"):
            _retriever().invoke("apple", k=k)
        with pytest.raises(ValueError):
            _retriever(k=k)

    def test_empty_index_returns_empty(self) -> None:
        retriever = SmallToBigRetriever(vectorstore=FaissIndex(BagOfWords()))
        assert retriever.invoke("anything") == []

    def test_k_larger_than_corpus(self) -> None:
        retriever = _retriever()
        parents = sorted(k for k in retriever.docstore.yield_keys() if "/parent/" in k)
        assert len(parents) == 5
        docs = retriever.invoke("apple", k=100)
        assert sorted(str(d.id) for d in docs) == parents

    async def test_async_matches_sync(self) -> None:
        retriever = _retriever()
        sync = retriever.invoke("dates desert", k=3)
        asy = await retriever.ainvoke("dates desert", k=3)
        assert [d.id for d in sync] == [d.id for d in asy]

    def test_batch(self) -> None:
        retriever = _retriever()
        out = retriever.batch(["apple", "cherries"], k=2)
        assert out == [retriever.invoke("apple", k=2), retriever.invoke("cherries", k=2)]
        assert [len(x) for x in out] == [2, 2]


class TestIngestion:
    def test_deterministic_keys_and_metadata(self) -> None:
        retriever = _retriever()
        parent = retriever.docstore.mget(["fruit/parent/0"])[0]
        assert parent is not None
        assert parent.metadata["level"] == "parent"
        assert parent.metadata["parent_id"] == "fruit/doc/0"
        child = retriever.docstore.mget(["fruit/child/0"])[0]
        assert child is not None
        assert child.metadata["parent_id"] == "fruit/parent/0"

    def test_readd_unchanged_is_noop_and_empty_is_reported(self) -> None:
        retriever = _retriever()
        result = retriever.add_documents([_doc(), Document(page_content="  ", id="blank")])
        assert result.unchanged == ["fruit"]
        assert result.empty == ["blank"]
        assert result.num_children == 0

    def test_ids_mismatch(self) -> None:
        with pytest.raises(ValueError, match="2 documents but 1 ids"):
            _retriever().add_documents([_doc(), _doc()], ids=["a"])

    def test_page_content_not_str(self) -> None:
        bad = Document(page_content="x")
        object.__setattr__(bad, "page_content", 42)
        with pytest.raises(TypeError, match="str page_content; got int"):
            _retriever().add_documents([bad])

    def test_child_larger_than_parent(self) -> None:
        with pytest.raises(ValueError, match="larger than"):
            _retriever(child_splitter=size_splitter(500), parent_splitter=size_splitter(100))

    def test_embedding_dimension_mismatch(self) -> None:
        retriever = _retriever()
        other = SmallToBigRetriever(vectorstore=retriever.vectorstore, docstore=retriever.docstore)
        retriever.vectorstore.embedding = DeterministicFakeEmbedding(size=7)  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="7-dimensional"):
            other.invoke("apple")

    def test_warns_when_children_exceed_the_model_input_window(self) -> None:
        class SmallWindow(BagOfWords):
            max_input_tokens = 5

        with pytest.warns(UserWarning, match="exceed the embedding model's input window of 5"):
            SmallToBigRetriever.from_documents([_doc()], SmallWindow())

    def test_no_warning_when_children_fit(self) -> None:
        class BigWindow(BagOfWords):
            max_input_tokens = 512

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            SmallToBigRetriever.from_documents([_doc()], BigWindow())

    def test_source_id_from_metadata_fields(self) -> None:
        doc = Document(page_content="Some text here.", metadata={"path": "a/b.txt", "page": 2})
        retriever = SmallToBigRetriever.from_documents(
            [doc], BagOfWords(), source_id_key=["path", "page"]
        )
        assert retriever.invoke("text")[0].metadata["source_id"] == "a/b.txt|2"

    def test_missing_parent_raises_or_skips(self, caplog: pytest.LogCaptureFixture) -> None:
        retriever = _retriever()
        before = retriever.invoke("apple tree", k=3)
        assert "fruit/parent/0" in [d.id for d in before]
        retriever.docstore.mdelete(["fruit/parent/0"])
        with pytest.raises(LookupError, match="not in the parent store"):
            retriever.invoke("apple tree", k=3)
        skipping = SmallToBigRetriever(
            vectorstore=retriever.vectorstore, docstore=retriever.docstore, on_missing="skip"
        )
        with caplog.at_level(logging.WARNING, logger="langchain_s2b"):
            docs = skipping.invoke("apple tree", k=3)
        # The k results were chosen before the fetch; the missing one is skipped, not refilled.
        assert docs == [d for d in before if d.id != "fruit/parent/0"]
        assert "Skipped 1 result" in caplog.text


class TestStoresAndIndexes:
    def test_byte_store_through_json_codec(self) -> None:
        byte_store = InMemoryByteStore()
        retriever = _retriever(byte_store=byte_store)
        assert isinstance(retriever.docstore, DocumentCodecStore)
        raw = byte_store.mget(["fruit/parent/0"])[0]
        assert raw is not None
        assert raw.startswith(b"{")
        assert len(retriever.invoke("apple", k=2)) == 2

    @pytest.mark.parametrize(
        "make",
        [
            lambda emb: InMemoryVectorStore(emb),
            lambda emb: FAISS.from_texts(["seed"], emb, ids=["seed"]),
        ],
    )
    def test_other_vector_stores(self, make: Any) -> None:
        emb = BagOfWords()
        store = make(emb)
        if isinstance(store, FAISS):
            store.delete(["seed"])
        retriever = SmallToBigRetriever(
            vectorstore=store, child_splitter=size_splitter(8), parent_splitter=size_splitter(45)
        )
        retriever.add_documents([_doc()])
        # two parents match (cherries, the desert), the others score 0 and tie
        docs = retriever.invoke("cherries red desert", k=2)
        exact = _retriever().invoke("cherries red desert", k=2)  # FaissIndex Flat: the same
        assert [(d.id, d.page_content) for d in docs] == [(d.id, d.page_content) for d in exact]
        assert [d.id for d in docs] == ["fruit/parent/2", "fruit/parent/3"]
        assert "Cherries" in docs[0].page_content
        assert "desert" in docs[1].page_content
        assert retriever.delete(["fruit"]) == ["fruit"]
        assert retriever.invoke("cherries red") == []

    async def test_sync_only_store_from_async(self) -> None:
        class SyncOnly(InMemoryStore):
            async def amget(self, keys: Any) -> Any:  # a store without native async
                return await asyncio.get_running_loop().run_in_executor(None, self.mget, keys)

        retriever = _retriever(docstore=SyncOnly())
        results = await asyncio.gather(*(retriever.ainvoke("apple", k=2) for _ in range(20)))
        assert all(len(r) == 2 for r in results)
