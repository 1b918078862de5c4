"""The lexical index is part of the child index: one commit, every store, one analyser.

Each test here is a defect of the lexical issue, reproduced: it failed before
the lexical index moved into the child index.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.store.children.hybrid_index import HybridChildIndex
from langchain_s2b.store.lexical import analyzer
from langchain_s2b.store.lexical.analyzer import analyze
from langchain_s2b.store.lexical.lexical_index import LexicalIndex

from ._embeddings import ExactWords

OLD = "Walrus tusks are long. The walrus lives in the Arctic."
NEW = "Penguin wings are short. The penguin lives in the south."
OTHER = "Seals rest on ice. A walrus eats clams."


def lexical_of(r: SmallToBigRetriever) -> LexicalIndex:
    index = r._io.index
    assert isinstance(index, HybridChildIndex)
    return index.lexical


def fresh(docs: list[Document], **fields: Any) -> SmallToBigRetriever:
    return SmallToBigRetriever.from_documents(docs, ExactWords(), mode="window", **fields)


def test_a_reader_sharing_the_index_sees_the_writers_update() -> None:
    # same number of leaves before and after: a count comparison saw nothing to catch up
    emb = ExactWords()
    store, docstore = FaissIndex(emb), InMemoryStore()
    writer = SmallToBigRetriever(vectorstore=store, docstore=docstore, mode="window")
    reader = SmallToBigRetriever(vectorstore=store, docstore=docstore, mode="window")
    writer.add_documents([Document(page_content=OLD, id="z"), Document(OTHER, id="o")])
    assert reader.invoke("walrus penguin", max_tokens=40)  # the reader's index is built
    writer.add_documents([Document(page_content=NEW, id="z")])
    assert sorted(lexical_of(reader).keys()) == [
        "o/sentence/0",
        "o/sentence/1",
        "z.g1/sentence/0",
        "z.g1/sentence/1",
    ]
    want = fresh([Document(page_content=NEW, id="z"), Document(OTHER, id="o")])
    query = "penguin walrus lives"
    assert [d.page_content for d in reader.invoke(query, max_tokens=40)] == [
        d.page_content for d in want.invoke(query, max_tokens=40)
    ]


def test_another_child_store_opened_later_knows_every_leaf() -> None:
    emb = ExactWords()
    docstore = InMemoryStore()
    built = SmallToBigRetriever(
        vectorstore=InMemoryVectorStore(emb), docstore=docstore, mode="window"
    )
    built.add_documents([Document(page_content=OLD, id="z"), Document(OTHER, id="o")])
    # another process opens the same stores: a new store object over the same vectors
    reopened_store = InMemoryVectorStore(emb)
    reopened_store.store = dict(built.vectorstore.store)  # type: ignore[attr-defined]
    reopened = SmallToBigRetriever(vectorstore=reopened_store, docstore=docstore, mode="window")
    query = "walrus clams"
    assert reopened.invoke(query, max_tokens=30) == built.invoke(query, max_tokens=30)
    # the first call read every leaf the docstore holds into the new store's lexical index
    assert lexical_of(reopened).keys() == {
        "z/sentence/0",
        "z/sentence/1",
        "o/sentence/0",
        "o/sentence/1",
    }


def test_a_docstore_that_can_not_list_its_keys_refuses_hybrid_in_one_line() -> None:
    class Unlisted(InMemoryStore):
        def yield_keys(self, *, prefix: str | None = None) -> Any:
            raise NotImplementedError

    r = SmallToBigRetriever(vectorstore=InMemoryVectorStore(ExactWords()), docstore=Unlisted())
    with pytest.raises(ValueError, match=r"^hybrid=True needs .* can not: pass hybrid=False\.$"):
        r.invoke("walrus")
    dense = r.model_copy(update={"hybrid": False})
    dense.add_documents([Document(page_content=OLD, id="z")])
    assert dense.invoke("walrus", k=1)[0].metadata["source_id"] == "z"


@pytest.mark.parametrize("kind", ["faiss", "inmemory"])
def test_a_failed_lexical_delete_leaves_both_parts_whole(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    emb = ExactWords()
    store = FaissIndex(emb) if kind == "faiss" else InMemoryVectorStore(emb)
    r = SmallToBigRetriever(vectorstore=store, mode="window")
    r.add_documents([Document(page_content=OLD, id="z")])
    before = r.invoke("walrus", max_tokens=30)
    assert before

    def broken(self: LexicalIndex, keys: Any) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(LexicalIndex, "delete", broken)
    with pytest.raises(OSError, match="disk gone"):
        r.delete(["z"])
    monkeypatch.undo()
    assert r.verify().ok
    assert r.invoke("walrus", max_tokens=30) == before
    assert r.delete(["z"]) == ["z"]
    assert r.invoke("walrus", max_tokens=30) == []
    assert len(lexical_of(r)) == 0


@pytest.mark.parametrize("kind", ["faiss", "inmemory"])
def test_a_failed_lexical_add_leaves_the_previous_version(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    emb = ExactWords()
    store = FaissIndex(emb) if kind == "faiss" else InMemoryVectorStore(emb)
    r = SmallToBigRetriever(vectorstore=store, mode="window")
    r.add_documents([Document(page_content=OLD, id="z")])
    lexical_of(r)  # built before the failure
    before = r.invoke("walrus penguin", max_tokens=30)

    def broken(self: LexicalIndex, entries: Any, rows: Any = None) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(LexicalIndex, "add", broken)
    with pytest.raises(OSError, match="disk gone"):
        r.add_documents([Document(page_content=NEW, id="z")])
    monkeypatch.undo()
    assert r.verify().ok
    assert r.invoke("walrus penguin", max_tokens=30) == before


def test_aadd_writes_the_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
    lexical_of(r)
    writes: list[int] = []
    add = LexicalIndex.add

    def counting(self: LexicalIndex, entries: Any, rows: Any = None) -> None:
        writes.append(len(entries))
        add(self, entries, rows)

    monkeypatch.setattr(LexicalIndex, "add", counting)
    asyncio.run(r.aadd_documents([Document(page_content=OLD, id="z")]))
    assert writes == [2]


# One analyser for text and queries, in every script ------------------------------------

MULTILINGUAL = {
    "hindi": ("दुनिया बहुत बड़ी है और सुंदर भी।", "दुनिया"),
    "thai": ("สวัสดีครับ ยินดีต้อนรับ", "สวัสดี"),
    "turkish": ("İstanbul büyük bir şehirdir.", "İstanbul"),
    "turkish, lower case": ("İstanbul büyük bir şehirdir.", "istanbul"),
    "greek": ("Η ΟΔΟΣ είναι μεγάλη.", "ΟΔΟΣ"),  # noqa: RUF001 (Greek on purpose)
    "greek, final sigma": ("Η ΟΔΟΣ είναι μεγάλη.", "οδος"),  # noqa: RUF001
    "chinese": ("北京欢迎你来参观。", "北京"),
    "japanese": ("東京タワーへようこそ。", "東京"),
    "arabic": ("مرحبا بالعالم الكبير", "بالعالم"),
    "english": ("The Norman_king's dukes ruled Normandy.", "NORMANDY"),
}


@pytest.mark.parametrize("case", sorted(MULTILINGUAL))
def test_an_indexed_word_is_always_found(case: str) -> None:
    text, word = MULTILINGUAL[case]
    index = LexicalIndex()
    index.add([("t/sentence/0", text, {}), ("u/sentence/0", "Unrelated filler words.", {})])
    assert [key for key, _ in index.search(word, 5)] == ["t/sentence/0"]


@pytest.mark.parametrize("case", sorted(MULTILINGUAL))
def test_the_query_analyser_is_the_engines_own(case: str) -> None:
    """The terms tantivy indexed for a text are exactly what analyze() makes of it."""
    text, _ = MULTILINGUAL[case]
    index = LexicalIndex()
    index.add([("t/sentence/0", text, {})])
    searcher = index._index.searcher()
    engine = {term for term, _ in searcher.terms_with_prefix("text", "")}
    assert engine == set(analyze(text))
    assert analyze(text), "every text here has words"


def test_the_analyser_folds_case_and_width_as_unicode_says() -> None:
    wide = "ＡＢＣ Straße İSTANBUL ΟΔΟΣ"  # noqa: RUF001 (full-width letters on purpose)
    assert analyze(wide) == ["abc", "strasse", "istanbul", "οδοσ"]
    assert analyzer.fold("ﬁ") == "fi"  # NFKC: a ligature is its letters


# filter= restricts the lexical list before it is ranked ---------------------------------


@pytest.mark.parametrize("kind", ["faiss", "inmemory"])
def test_a_filter_selects_the_lexical_list_before_ranking(kind: str) -> None:
    # 150 other sources say "walrus" more often (better BM25); the filtered source says it once
    emb = ExactWords(size=4096)
    store = FaissIndex(emb) if kind == "faiss" else InMemoryVectorStore(emb)
    r = SmallToBigRetriever(vectorstore=store, mode="window")
    docs = [
        Document(page_content="Walrus walrus walrus here.", id=f"n{i}", metadata={"t": "noise"})
        for i in range(150)
    ]
    docs.append(Document(page_content="One walrus in a long quiet sentence.", id="k"))
    docs[-1].metadata["t"] = "keep"
    r.add_documents(docs)
    for flt in ({"t": "keep"}, lambda meta: meta["t"] == "keep"):
        found = r._io.index.search_text("walrus", 100, flt)  # type: ignore[attr-defined]
        assert [key for key, _ in found] == ["k/sentence/0"]
