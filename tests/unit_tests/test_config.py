"""Configuration mistakes get one clear line, at the moment they are made (issue 11, C8)."""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryByteStore, InMemoryStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import size_splitter

DOCS = [Document("Alpha beta gamma. Delta epsilon zeta.", id="a")]


def emb() -> DeterministicFakeEmbedding:
    return DeterministicFakeEmbedding(size=16)


def chars(size: int) -> RecursiveCharacterTextSplitter:
    return RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=0)


class TestSplitterSizes:
    def test_a_400_character_child_fits_a_300_token_parent(self) -> None:
        retriever = SmallToBigRetriever(
            vectorstore=FaissIndex(emb()),
            child_splitter=chars(400),
            parent_splitter=size_splitter(300),
        )
        assert [lv.name for lv in retriever._levels] == ["child", "parent"]

    def test_a_300_token_child_does_not_fit_a_400_character_parent(self) -> None:
        expected = (
            r"^SmallToBigRetriever: The 'child' splitter's chunks \(chunk_size=1200 characters\) "
            r"are "
            r"larger than the 'parent' splitter's \(chunk_size=400 characters\); children must "
            r"be smaller than parents\.$"
        )
        with pytest.raises(ValueError, match=expected):
            SmallToBigRetriever(
                vectorstore=FaissIndex(emb()),
                child_splitter=size_splitter(300),
                parent_splitter=chars(400),
            )


class TestConstructor:
    def test_byte_store_and_docstore_together_are_refused(self) -> None:
        with pytest.raises(ValueError, match=r"^Pass docstore= .* or byte_store= .*, not both\.$"):
            SmallToBigRetriever(
                vectorstore=FaissIndex(emb()),
                docstore=InMemoryStore(),
                byte_store=InMemoryByteStore(),
            )

    def test_unknown_options_are_refused_not_ignored(self) -> None:
        with pytest.raises(
            ValueError,
            match=r"^Unknown SmallToBigRetriever option\(s\) \['search_type', 'top_k'\]; allowed",
        ):
            SmallToBigRetriever.from_documents(DOCS, emb(), top_k=10, search_type="mmr")

    def test_a_field_error_is_one_line(self) -> None:
        with pytest.raises(ValueError) as info:
            SmallToBigRetriever(vectorstore=FaissIndex(emb()), k=0)
        assert str(info.value) == "SmallToBigRetriever: k: Input should be greater than 0 (got 0)"


class TestCalls:
    def test_as_tool_with_a_bad_option_fails_when_built(self) -> None:
        retriever = SmallToBigRetriever.from_documents(DOCS, emb())
        with pytest.raises(ValueError, match=r"^k must be at least 1; got 0\.$"):
            retriever.as_tool(k=0)

    @pytest.mark.parametrize("query", [None, 3, ["a"]])
    def test_a_query_that_is_not_a_string(self, query: object) -> None:
        retriever = SmallToBigRetriever.from_documents(DOCS, emb())
        with pytest.raises(
            TypeError, match=rf"^A query must be a string; got {type(query).__name__} "
        ):
            retriever.invoke(query)  # type: ignore[arg-type]

    async def test_a_query_that_is_not_a_string_async(self) -> None:
        retriever = SmallToBigRetriever.from_documents(DOCS, emb())
        with pytest.raises(TypeError, match=r"^A query must be a string; got NoneType"):
            await retriever.ainvoke(None)  # type: ignore[arg-type]

    def test_the_kept_defaults_follow_assignments_copies_and_in_place_changes(self) -> None:
        retriever = SmallToBigRetriever.from_documents(
            DOCS, emb(), mode="window", k=1, window_size=0
        )
        assert [len(retriever.invoke("a")), retriever.defaults().k] == [1, 1]
        retriever.k = 2  # two sentences, each its own window
        assert [len(retriever.invoke("a")), retriever.defaults().k] == [2, 2]
        retriever.search_kwargs["window_size"] = 1  # one window now holds both
        assert retriever.defaults().window_size == 1
        assert [d.metadata["split_ids"] for d in retriever.invoke("a")] == [[0, 1]]
        copy = retriever.model_copy(update={"k": 3})
        assert [copy.defaults().k, retriever.defaults().k] == [3, 2]
        retriever.search_kwargs["k"] = 0
        with pytest.raises(ValueError, match=r"^k must be at least 1; got 0\.$"):
            retriever.invoke("a")

    def test_per_call_options_kept_are_checked_over_the_current_defaults(self) -> None:
        """Issue 34: a call's plain options are checked once and kept, by value and type."""
        retriever = SmallToBigRetriever.from_documents(DOCS, emb(), mode="window", window_size=0)
        for _ in range(2):  # the second call answers from the kept options
            assert [len(retriever.invoke("a", k=1)), len(retriever.invoke("a", k=2))] == [1, 2]
        with pytest.raises(ValueError, match=r"^k must be an integer; got 1\.0\.$"):
            retriever.invoke("a", k=1.0)  # equal to 1 and hashed alike, but not an integer
        with pytest.raises(ValueError, match=r"^k must be a number; got True\.$"):
            retriever.invoke("a", k=True)
        retriever.search_kwargs["window_size"] = 1  # new defaults: the options over them
        assert [d.metadata["split_ids"] for d in retriever.invoke("a", k=1)] == [[0, 1]]
        retriever.mode = "parent"
        assert [d.metadata["mode"] for d in retriever.invoke("a", k=1)] == ["parent"]
        kept = retriever._overrides
        assert kept is not None
        assert len(kept._kept) == 1  # k=1 over these defaults
        for i in range(70):  # full at KEPT (64): emptied, then 7 more (the last 7 calls')
            retriever.invoke("a", k=1, fetch_k=i + 1)
        assert retriever._overrides is kept
        assert list(kept._kept) == [(("k", int, 1), ("fetch_k", int, i)) for i in range(64, 71)]
        with pytest.raises(ValueError, match=r"^Unknown retrieval option\(s\) \['kk'\]"):
            retriever.invoke("a", kk=1)

    def test_metadata_json_can_not_hold_fails_at_add_naming_the_document(self) -> None:
        retriever = SmallToBigRetriever(vectorstore=FaissIndex(emb()))
        doc = Document("Some text.", id="dated", metadata={"when": datetime.date(2026, 1, 2)})
        with pytest.raises(
            ValueError, match=r"^Document id='dated' has metadata that is not JSON-serialisable"
        ):
            retriever.add_documents([doc])
        assert list(retriever.docstore.yield_keys()) == []


class TestModelIdentity:
    def test_another_model_of_the_same_dimension_warns_at_load(self, tmp_path: Path) -> None:
        class Mirrored(DeterministicFakeEmbedding):
            def embed_query(self, text: str) -> list[float]:
                return [-x for x in super().embed_query(text)]

        SmallToBigRetriever.from_documents(DOCS, emb()).save(tmp_path / "idx")
        with pytest.warns(
            UserWarning, match=r"embeds text differently from the one this index was built with"
        ):
            SmallToBigRetriever.load(tmp_path / "idx", Mirrored(size=16))

    def test_the_same_model_loads_quietly(self, tmp_path: Path) -> None:
        SmallToBigRetriever.from_documents(DOCS, emb()).save(tmp_path / "idx")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert [d.page_content for d in loaded.invoke("Alpha", k=1)] == [DOCS[0].page_content]
