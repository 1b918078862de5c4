"""langchain-tests' standard retriever suite against SmallToBigRetriever."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_s2b import SmallToBigRetriever

TEXT = " ".join(f"Sentence number {i} talks about topic {i % 7}." for i in range(120))


def _populated(mode: str) -> SmallToBigRetriever:
    docs = [Document(page_content=TEXT, id=f"doc-{n}") for n in range(3)]
    small = {"child_splitter": None, "parent_splitter": None}
    if mode == "parent":
        from langchain_s2b.core.splitters import size_splitter

        small = {"child_splitter": size_splitter(20), "parent_splitter": size_splitter(80)}
    return SmallToBigRetriever.from_documents(
        docs, DeterministicFakeEmbedding(size=32), mode=mode, **small
    )


class TestParentModeStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[SmallToBigRetriever]:
        return SmallToBigRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        built = _populated("parent")
        return {"vectorstore": built.vectorstore, "docstore": built.docstore, "mode": "parent"}

    @property
    def retriever_query_example(self) -> str:
        return "topic 3"


class TestWindowModeStandard(TestParentModeStandard):
    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        built = _populated("window")
        return {
            "vectorstore": built.vectorstore,
            "docstore": built.docstore,
            "mode": "window",
            "window_size": 1,
        }


class TestMultilevelModeStandard(TestParentModeStandard):
    """k counts document contexts in multilevel mode: the corpus has three documents."""

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        built = _populated("multilevel")
        return {"vectorstore": built.vectorstore, "docstore": built.docstore, "mode": "multilevel"}
