"""Hostile input: a clear error or a correct result, never a crash, never an escape.

Property-based (hypothesis): random Unicode (surrogates, NUL, RTL marks,
combining marks), empty and whitespace-only documents, ids with ``/``, ``..``
and spaces go through add, query, delete, save and load with a
``LocalFileStore``; every file stays under the store's root.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_classic.storage import LocalFileStore
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryByteStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import section_splitter, size_splitter


class AnyTextEmbedding(DeterministicFakeEmbedding):
    """The fake embedding, hashing lone surrogates too (the stock one raises on them)."""

    @staticmethod
    def _get_seed(text: str) -> int:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return int(digest, 16) % 10**8


SPECIAL = [
    "\x00",
    "\ud800",
    "\udfff",
    "\u202e",
    "\u200f",
    "\u05e9\u05dc\u05d5\u05dd",
    "e\u0301\u0301",
    "\ufeff",
    "\n\n",
    " ",
    "\t",
    "# ",
    ". ",
    "..",
    "/",
    "\U0001f600",
]
CHARS = st.characters(codec=None, exclude_categories=())  # includes surrogates (Cs)
TEXT = st.lists(st.one_of(st.text(CHARS, max_size=30), st.sampled_from(SPECIAL)), max_size=40).map(
    "".join
)
IDS = st.one_of(
    st.sampled_from(["..", "../..", "a/b", "/abs", "a b", " ", ".", "x/../y", "C:\\x", "~"]),
    st.text(CHARS, min_size=1, max_size=20),
)
SOURCES = st.lists(st.tuples(IDS, TEXT), max_size=5, unique_by=lambda pair: pair[0])


def make(store: object) -> SmallToBigRetriever:
    return SmallToBigRetriever(
        vectorstore=FaissIndex(AnyTextEmbedding(size=16)),
        byte_store=store,
        child_splitter=size_splitter(6),
        parent_splitter=section_splitter(20),
    )


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def assert_inside(base: Path, root: Path) -> None:
    """Nothing was written next to ``root``, and every file under it resolves inside it."""
    assert {p.name for p in base.iterdir()} <= {"nodes", "save"}
    for path in files_under(root):
        assert path.resolve().is_relative_to(root.resolve())


def assert_correct(results: list[Document], texts: dict[str, str]) -> None:
    for doc in results:
        meta = doc.metadata
        assert doc.page_content == texts[meta["source_id"]][meta["start"] : meta["end"]]
        for match in meta["matches"]:
            assert meta["start"] <= match["start"] <= match["end"] <= meta["end"]


def ask(r: SmallToBigRetriever, query: str, **options: Any) -> list[Document]:
    """``r.invoke``; a query without a word (empty, only whitespace) is refused in one line."""
    if query.strip():
        return r.invoke(query, **options)
    with pytest.raises(ValueError, match=r"^The query is empty \(got .*\); give a question"):
        r.invoke(query, **options)
    return []


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(sources=SOURCES, query=TEXT)
def test_hostile_sources_through_the_whole_lifecycle(
    sources: list[tuple[str, str]], query: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "nodes"
        r = make(LocalFileStore(root))
        ids = [sid for sid, _ in sources]
        texts = dict(sources)
        result = r.add_documents([Document(text) for _, text in sources], ids=ids)
        stored = [sid for sid in ids if texts[sid].strip()]
        assert sorted(result.added) == sorted(stored)
        assert sorted(result.empty) == sorted(set(ids) - set(stored))
        assert_inside(base, root)
        for q in [query, *texts.values()]:
            assert_correct(ask(r, q), texts)
            assert_correct(ask(r, q, mode="window", window_size=1), texts)
        r.save(base / "save")
        loaded = SmallToBigRetriever.load(
            base / "save", AnyTextEmbedding(size=16), byte_store=LocalFileStore(root)
        )
        assert [d.page_content for d in ask(loaded, query)] == [
            d.page_content for d in ask(r, query)
        ]
        assert loaded.verify().ok
        assert sorted(loaded.delete([*ids, "never-added"])) == sorted(stored)
        assert files_under(root) == []
        assert ask(loaded, query) == []
        assert_inside(base, root)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(source_id=IDS, text=TEXT)
def test_stock_embedding_gives_a_clear_error_or_a_result(source_id: str, text: str) -> None:
    """The stock fake embedding can not encode lone surrogates: a ValueError, not a crash."""
    r = SmallToBigRetriever(vectorstore=FaissIndex(DeterministicFakeEmbedding(size=8)))
    error: UnicodeEncodeError | None = None
    try:
        r.add_documents([Document(text)], ids=[source_id])
    except UnicodeEncodeError as err:  # a ValueError that names the character
        error = err
    if error is not None:
        assert "surrogate" in str(error)
        r.verify(repair=True)
        assert r.verify().ok
        return
    assert_correct(ask(r, text[:20] or "x"), {source_id: text})


@pytest.mark.parametrize("bad", ["", 5, b"bytes"])
def test_bad_ids_are_clear_errors(bad: object) -> None:
    r = make(InMemoryByteStore())
    with pytest.raises((ValueError, TypeError), match=r"ids\[0\]|source id"):
        r.add_documents([Document("text")], ids=[bad])  # type: ignore[list-item]


def test_bad_documents_are_clear_errors() -> None:
    r = make(InMemoryByteStore())
    with pytest.raises(TypeError, match="Document #0 must be a Document"):
        r.add_documents(["not a document"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="appears twice"):
        r.add_documents([Document("a"), Document("b")], ids=["same", "same"])
    with pytest.raises(ValueError, match="JSON-serialisable"):
        r.add_documents([Document("text", metadata={"obj": object()})], ids=["m"])
    assert r.verify().ok


def test_a_10_mb_document(tmp_path: Path) -> None:
    """One 10 MB source with RTL, combining marks and NUL: add, query, save, load, delete."""
    paragraph = " ".join(
        ["alpha beta d\u00e9lta \u05e9\u05dc\u05d5\u05dd x\u0301 \u202eevil\u202c\x00."] * 15
    )
    text = "\n\n".join(f"{i} {paragraph}" for i in range(10_000_000 // len(paragraph) + 1))
    assert len(text) >= 10_000_000
    r = SmallToBigRetriever(
        vectorstore=FaissIndex(AnyTextEmbedding(size=8)), byte_store=InMemoryByteStore()
    )
    result = r.add_documents([Document(text, id="big")])
    assert result.added == ["big"]
    assert result.num_children > 1000
    found = r.invoke("alpha beta 123")
    assert found
    assert_correct(found, {"big": text})
    r.save(tmp_path / "save")
    loaded = SmallToBigRetriever.load(tmp_path / "save", AnyTextEmbedding(size=8))
    assert [d.page_content for d in loaded.invoke("alpha beta 123")] == [
        d.page_content for d in found
    ]
    assert loaded.delete(["big"]) == ["big"]
    assert list(loaded.docstore.yield_keys()) == []
    assert loaded.verify().ok
