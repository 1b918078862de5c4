"""Junk leaves: what is not embedded."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.junk import is_junk
from langchain_s2b.store.vectors.faiss_index import FaissIndex


@pytest.mark.parametrize("text", ["..", "----", "1.", "  \n", "", "(2)", "* * *", "12 34", "—"])
def test_fragments_without_letters_are_junk(text: str) -> None:
    assert is_junk(text)


@pytest.mark.parametrize("text", ["a", "I.", "Rollo.", "ß", "東京", "e.g. 5", "x = 1"])
def test_any_letter_in_any_script_is_kept(text: str) -> None:
    assert not is_junk(text)


# Through the retriever: junk leaves are stored, not embedded -------------------------

RST = "Intro line one.\n\n..\n\nThe Normans came from Normandy.\n\n----\n\n1.\n\nRollo led them.\n"


def _retriever(**fields: object) -> SmallToBigRetriever:
    doc = Document(page_content=RST, id="rst")
    return SmallToBigRetriever.from_documents(
        [doc], DeterministicFakeEmbedding(size=16), mode="window", **fields
    )


def test_junk_leaves_are_not_embedded_but_stay_in_windows() -> None:
    retriever = _retriever(window_size=6, k=1)
    index = retriever.vectorstore
    assert isinstance(index, FaissIndex)
    embedded = index.get_by_ids(index.keys())
    texts = [d.page_content.strip() for d in embedded]
    assert texts == ["Intro line one.", "The Normans came from Normandy.", "Rollo led them."]
    # a window reaches across the junk leaves: the text stays the exact source slice
    (doc,) = retriever.invoke("Normans")
    assert doc.page_content == RST[doc.metadata["start"] : doc.metadata["end"]] == RST
    # the lexical twin holds the same leaves
    lexical = retriever._io.index.lexical  # type: ignore[attr-defined]
    assert lexical.keys() == set(index.keys())


def test_verify_counts_junk_leaves_as_consistent_and_delete_removes_all() -> None:
    retriever = _retriever()
    report = retriever.verify()
    assert report.ok
    assert retriever.delete(["rst"]) == ["rst"]
    assert list(retriever.docstore.yield_keys()) == []
    assert retriever._io.index.lexical.keys() == set()  # type: ignore[attr-defined]
