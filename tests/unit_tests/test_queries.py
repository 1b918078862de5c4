"""What a query may be: refused in one line before any search when it can not be answered.

A query without a word (empty or only whitespace) is refused by ``invoke``,
``ainvoke``, ``batch`` and the agent tool, as ``s2b query`` and MCP refuse it.
A query vector with a NaN or an infinity (a broken model) would score every
child NaN: ranked anyhow under hybrid search, or none kept without it. It is
refused where it is embedded, for every child index, sync, async and batched.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.store.children.child_index import _finite
from langchain_s2b.tools import as_tool

from ._embeddings import BagOfWords

TEXT = (
    "The Normans gave their name to Normandy. Rollo swore fealty to King Charles. "
    "Norman mercenaries served in Italy.\n\nA steam engine uses steam. James Watt added a "
    "separate condenser."
)


class Broken(BagOfWords):
    """BagOfWords whose query vector holds ``bad`` when the query names "poison"."""

    def __init__(self, bad: float) -> None:
        super().__init__()
        self.bad = bad
        self.model = "broken-1"

    def embed_query(self, text: str) -> list[float]:
        vec = super().embed_query(text)
        if "poison" in text:
            vec[3] = self.bad
        return vec

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


class BrokenNoBatch(Broken):
    """Without ``embed_queries``: a batch is embedded one query at a time."""

    embed_queries = None  # type: ignore[assignment]


def _retriever(store: str, emb: BagOfWords, **fields: Any) -> SmallToBigRetriever:
    vectorstore: VectorStore = FaissIndex(emb) if store == "faiss" else InMemoryVectorStore(emb)
    fields.setdefault("contextual_headers", False)
    retriever = SmallToBigRetriever(vectorstore=vectorstore, **fields)
    retriever.add_documents([Document(page_content=TEXT)], ids=["n"])
    return retriever


def _nan_message(name: str = "Broken") -> str:
    return (
        rf"^The embedding {name} \(broken-1\) returned NaN or infinite values for the query "
        r"'poison Normans'; a query vector must be finite numbers\.$"
    )


class TestNonFiniteQueryVector:
    @given(
        st.lists(
            st.floats() | st.sampled_from([1.7e308, -1.7e308, math.inf, -math.inf, math.nan]),
            min_size=1,
            max_size=40,
        )
    )
    def test_refused_exactly_when_a_value_is_not_finite(self, values: list[float]) -> None:
        # the sum's shortcut never passes an inf or a NaN, and an overflowing sum of finite
        # values (1.7e308 twice) is still let through
        emb = Broken(0.0)
        if all(math.isfinite(v) for v in values):
            assert _finite(emb, "q", values) == values
        else:
            with pytest.raises(ValueError, match="NaN or infinite"):
                _finite(emb, "q", values)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
    @pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "dense"])
    @pytest.mark.parametrize("store", ["faiss", "generic"])
    def test_refused_in_one_line(self, bad: float, hybrid: bool, store: str) -> None:
        r = _retriever(store, Broken(bad), hybrid=hybrid, mode="window")
        message = _nan_message()
        with pytest.raises(ValueError, match=message):
            r.invoke("poison Normans")
        with pytest.raises(ValueError, match=message):
            asyncio.run(r.ainvoke("poison Normans"))
        with pytest.raises(ValueError, match=message):
            r.batch(["Normans", "poison Normans"])
        with pytest.raises(ValueError, match=message):
            asyncio.run(r.abatch(["Normans", "poison Normans"]))
        assert [d.metadata["source_id"] for d in r.invoke("Normans", k=1)] == ["n"]

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_every_mode_and_a_model_without_a_batch_call(self, mode: str) -> None:
        r = _retriever("faiss", BrokenNoBatch(math.nan), mode=mode)
        message = _nan_message("BrokenNoBatch")
        for call in (
            lambda: r.invoke("poison Normans", k=None, max_tokens=200),
            lambda: r.batch(["poison Normans"]),
            lambda: asyncio.run(r.abatch(["poison Normans", "Normans"])),
        ):
            with pytest.raises(ValueError, match=message):
                call()


EMPTY = (
    r"^The query is empty \(got {got}\); give a question or keywords, e\.g\. 'who was Rollo\?'\.$"
)


class FixedRetriever(BaseRetriever):
    """Any other retriever: answers every query, the empty one too."""

    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
        return [Document(page_content="anything")]


class TestEmptyQuery:
    """LangChain's retrievers leave an empty query open; here it is refused, as s2b query does."""

    @pytest.mark.parametrize(
        "query", ["", "   ", "\n\t ", "\u3000"], ids=["empty", "sp", "ws", "u3000"]
    )
    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_refused_in_one_line_everywhere(self, query: str, mode: str) -> None:
        r = _retriever("faiss", BagOfWords(), mode=mode)
        message = EMPTY.format(got=re.escape(repr(query)))
        with pytest.raises(ValueError, match=message):
            r.invoke(query)
        with pytest.raises(ValueError, match=message):
            asyncio.run(r.ainvoke(query))
        with pytest.raises(ValueError, match=message):
            r.batch(["Normans", query])
        with pytest.raises(ValueError, match=message):
            asyncio.run(r.abatch([query]))
        got = r.batch(["Normans", query], return_exceptions=True)
        assert all(isinstance(one, ValueError) for one in got)
        assert [d.metadata["source_id"] for d in r.invoke("Normans", k=1)] == ["n"]

    @pytest.mark.parametrize("retriever", ["s2b", "other"])
    def test_the_agent_tool_refuses_it_for_any_retriever(self, retriever: str) -> None:
        r = _retriever("faiss", BagOfWords()) if retriever == "s2b" else FixedRetriever()
        tool = as_tool(r)
        message = EMPTY.format(got=re.escape(repr(" ")))
        with pytest.raises(ValueError, match=message):
            tool.invoke({"query": " "})
        with pytest.raises(ValueError, match=message):
            asyncio.run(tool.ainvoke({"query": " "}))
        assert tool.invoke({"query": "Normans"}) != "No results."

    def test_a_long_query_shows_its_start(self) -> None:
        query = " " * 100
        with pytest.raises(ValueError, match=EMPTY.format(got=re.escape(repr(" " * 60)))):
            _retriever("faiss", BagOfWords()).invoke(query)
