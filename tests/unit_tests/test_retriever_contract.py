"""What a LangChain user expects of a retriever object: copies, metadata, saving, ties.

Each test is a defect of the lexical issue, reproduced: copies that kept the
old stores, source metadata overwritten by node fields, an index_factory that
saved but never loaded, ties that followed the update history, an expander
lost after an update, and a deep copy that failed with a ``TypeError`` about a lock.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import ConfigurableField
from langchain_core.stores import InMemoryByteStore

from langchain_s2b import FaissIndex, SentenceWindowExpander, SmallToBigRetriever
from langchain_s2b.store.lexical import lexical_index
from langchain_s2b.store.nodes.node_store import NodeStore

from ._embeddings import ExactWords

A = "Tenant A keeps walrus notes. The walrus sleeps."
B = "Tenant B keeps penguin notes. The penguin swims."


def tenant(text: str, **fields: Any) -> SmallToBigRetriever:
    return SmallToBigRetriever.from_documents(
        [Document(page_content=text, id="notes")], ExactWords(), mode="window", **fields
    )


class TestCopies:
    def test_a_copy_uses_exactly_the_stores_it_names(self) -> None:
        a, b = tenant(A), tenant(B)
        copied = a.model_copy(update={"vectorstore": b.vectorstore, "docstore": b.docstore})
        for budget in (None, 40):
            docs = copied.invoke("walrus penguin", max_tokens=budget)
            assert [d.page_content for d in docs] == [
                d.page_content for d in b.invoke("walrus penguin", max_tokens=budget)
            ]
            assert all("penguin" in d.page_content for d in docs)
        # and the original still serves its own
        assert all("walrus" in d.page_content for d in a.invoke("walrus penguin"))

    def test_a_copy_naming_a_docstore_drops_the_byte_store(self) -> None:
        a = tenant(A, byte_store=InMemoryByteStore())
        b = tenant(B)
        copied = a.model_copy(update={"vectorstore": b.vectorstore, "docstore": b.docstore})
        assert copied.byte_store is None
        assert copied.docstore is b.docstore
        assert [d.page_content for d in copied.invoke("penguin")] == [
            d.page_content for d in b.invoke("penguin")
        ]

    def test_a_copy_of_options_shares_the_runner_and_builds_nothing(self) -> None:
        a = tenant(A)
        copied = a.model_copy(update={"k": 1})
        assert copied._io is a._io
        assert copied.invoke("walrus", max_tokens=30) == a.invoke("walrus", max_tokens=30)

    @pytest.mark.parametrize("byte_store", [False, True])
    def test_configurable_fields_build_nothing_per_call(
        self, byte_store: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        fields = {"byte_store": InMemoryByteStore()} if byte_store else {}
        r = tenant(A, **fields)
        r.invoke("walrus", max_tokens=30)  # the lexical index is built once, here
        made: list[int] = []
        original = lexical_index.LexicalIndex.__init__

        def counting(self: lexical_index.LexicalIndex) -> None:
            made.append(1)
            original(self)

        monkeypatch.setattr(lexical_index.LexicalIndex, "__init__", counting)
        configurable = r.configurable_fields(
            k=ConfigurableField(id="k"), mode=ConfigurableField(id="mode")
        )
        want = r.invoke("walrus", k=1, max_tokens=30)
        for _ in range(3):
            got = configurable.invoke("walrus", config={"configurable": {"k": 1}}, max_tokens=30)
            assert got == want
        assert made == []
        with_config = r.with_config(tags=["t"])
        assert with_config.invoke("walrus", max_tokens=30) == r.invoke("walrus", max_tokens=30)

    def test_deep_copy_and_pickle_are_refused_in_one_line(self) -> None:
        r = tenant(A)
        message = r"^A SmallToBigRetriever can not be deep-copied or pickled: it holds live"
        with pytest.raises(TypeError, match=message):
            copy.deepcopy(r)
        with pytest.raises(TypeError, match=message):
            pickle.dumps(r)
        with pytest.raises(TypeError, match=message):
            r.model_copy(deep=True)
        assert copy.copy(r).invoke("walrus") == r.invoke("walrus")


class TestSourceMetadata:
    @pytest.mark.parametrize("name", ["level", "start", "end", "parent_id", "split_id"])
    def test_a_field_named_like_a_node_field_is_refused_in_one_line(self, name: str) -> None:
        r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        doc = Document(page_content=A, id="n", metadata={name: "advanced", "topic": "x"})
        with pytest.raises(ValueError, match=rf"^Document id='n' has metadata \['{name}'\] that"):
            r.add_documents([doc])
        assert r.invoke("walrus") == []  # nothing half-written

    def test_its_own_source_id_is_allowed(self) -> None:
        r = SmallToBigRetriever(
            vectorstore=FaissIndex(ExactWords()), mode="window", source_id_key="source_id"
        )
        r.add_documents([Document(page_content=A, metadata={"source_id": "n"})])
        assert {d.metadata["source_id"] for d in r.invoke("walrus")} == {"n"}
        by_id = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        with pytest.raises(ValueError, match=r"has metadata \['source_id'\] that every node"):
            by_id.add_documents([Document(page_content=B, id="m", metadata={"source_id": "x"})])


class TestSaving:
    def test_an_index_factory_that_can_not_round_trip_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"^index_factory='IDMap,Flat': FaissIndex maps its"):
            FaissIndex(ExactWords(), "IDMap,Flat")

    def test_a_save_that_does_not_read_back_keeps_the_previous_one(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        r = tenant(A)
        r.save(tmp_path / "idx")
        first = (tmp_path / "idx" / "CURRENT").read_text()

        def unreadable(directory: Any) -> None:
            raise ValueError("reads back as 0 vectors")

        monkeypatch.setattr(FaissIndex, "check_saved", staticmethod(unreadable))
        r.add_documents([Document(page_content=B, id="more")])
        with pytest.raises(ValueError, match="reads back as 0 vectors"):
            r.save(tmp_path / "idx")
        monkeypatch.undo()
        assert (tmp_path / "idx" / "CURRENT").read_text() == first
        loaded = SmallToBigRetriever.load(tmp_path / "idx", r.vectorstore.embeddings)
        assert [d.metadata["source_id"] for d in loaded.invoke("walrus penguin")] == ["notes"]


class TestTies:
    def test_ties_rank_by_source_and_position_whatever_the_update_history(self) -> None:
        text = "Equal words here."
        r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        r.add_documents(
            [Document(page_content=text, id="a"), Document(page_content=text, id="a-b")]
        )
        before = [d.metadata["source_id"] for d in r.invoke("equal", k=2)]
        # a metadata-only edit moves "a" to generation 1 ("a.g1", which sorts after "a-b")
        r.add_documents([Document(page_content=text, id="a", metadata={"v": 2})])
        for budget in (None, 100):
            after = [d.metadata["source_id"] for d in r.invoke("equal", k=2, max_tokens=budget)]
            assert after == before == ["a", "a-b"]


class TestExpanderAfterUpdates:
    def test_the_expander_reads_each_sources_generation(self) -> None:
        first = "One alpha. Two beta. Three gamma. Four delta."
        r = SmallToBigRetriever.from_documents(
            [Document(page_content=first, id="s")], ExactWords(), mode="window"
        )
        r.add_documents([Document(page_content=first + " Five epsilon.", id="s")])
        (leaf,) = r.vectorstore.similarity_search("gamma", k=1)
        assert leaf.metadata["source_key"] == "s.g1"
        leaf.metadata.pop("source_key")  # what another retriever (BM25 ...) would hand over
        expander = SentenceWindowExpander(store=r.docstore, level="sentence", window_size=1)
        (window,) = expander.invoke([leaf])
        assert window.page_content == "Two beta. Three gamma. Four delta. "
        assert window.metadata["missing_split_ids"] == []
        assert isinstance(r.docstore, NodeStore)
