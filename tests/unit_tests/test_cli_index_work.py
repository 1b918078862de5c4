"""The work ``s2b index`` does beyond embedding: the model made once, no BM25 index in writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import models
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.indexer import leaf_texts
from langchain_s2b.cli.loaders import read_documents
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.lexical import lexical_index
from langchain_s2b.store.vectors.faiss_index import FaissIndex

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
ONE = (
    "# Rollo\n\nRollo led the Normans. He swore fealty to King Charles.\n\nNormandy took its name."
)
TWO = "The steam engine used steam. James Watt added a separate condenser to the engine."
CHANGED = TWO + "\n\nLocomotives ran on steam. Rollo never saw one."


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


class _Count:
    """Counts calls of a function or class, then calls it."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.target(*args, **kwargs)


class _Recorder(Embeddings):
    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [[1.0]] * len(texts)

    def embed_query(self, text: str) -> list[float]:
        return [1.0]


def _articles() -> list[Document]:
    with (DATA / "articles.jsonl").open() as fh:
        rows = [json.loads(line) for line in fh]
    return [Document(page_content=r["text"], id=r["id"]) for r in rows]


def test_the_planning_pass_splits_like_a_hybrid_retriever_without_a_bm25_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs = _articles()
    recorder = _Recorder()
    SmallToBigRetriever(vectorstore=FaissIndex(recorder), mode="multilevel").add_documents(docs)
    made = _Count(lexical_index.LexicalIndex)
    monkeypatch.setattr("langchain_s2b.store.vectors.faiss_lexical.LexicalIndex", made)
    monkeypatch.setattr("langchain_s2b.store.vectors.faiss_writes.LexicalIndex", made)
    monkeypatch.setattr("langchain_s2b.store.children.hybrid_index.LexicalIndex", made)
    assert leaf_texts(docs) == recorder.texts  # same chunks, same order as the store embeds
    assert len(recorder.texts) == 578
    assert made.calls == 0


def test_index_and_delete_make_the_model_once_and_no_bm25_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "one.md").write_text(ONE)
    (folder / "two.md").write_text(TWO)
    store = tmp_path / "store"
    made = _Count(models.make_embedding)
    lexical = _Count(lexical_index.LexicalIndex)
    monkeypatch.setattr(models, "make_embedding", made)
    monkeypatch.setattr("langchain_s2b.store.vectors.faiss_lexical.LexicalIndex", lexical)
    monkeypatch.setattr("langchain_s2b.store.vectors.faiss_writes.LexicalIndex", lexical)
    monkeypatch.setattr("langchain_s2b.store.children.hybrid_index.LexicalIndex", lexical)

    assert main(["index", str(folder), "--store", str(store)]) == 0  # a new store
    assert (made.calls, lexical.calls) == (1, 0)
    (folder / "two.md").write_text(CHANGED)
    assert main(["index", str(folder), "--store", str(store)]) == 0  # an update
    assert (made.calls, lexical.calls) == (2, 0)
    assert main(["delete", str(folder / "one.md"), "--store", str(store)]) == 0
    assert (made.calls, lexical.calls) == (3, 0)
    out = capsys.readouterr().out.splitlines()
    # two.md's first sentence is reused; its last one now ends in "\n\n" (a new text), and two
    # sentences are new
    assert out[2].endswith(
        "0 added, 1 updated, 0 removed, 1 unchanged; 1 document(s), 4 chunk(s), 4 vector(s) "
        "(3 embedded, 1 reused)"
    )
    assert out[4] == f"deleted 1 file(s) (1 document(s)) from {store}"


def test_a_budget_query_after_an_update_answers_like_a_store_indexed_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hybrid (BM25) ranking a budget uses is built by the query, not by the writers."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "one.md").write_text(ONE)
    (folder / "two.md").write_text(TWO)
    updated, fresh = tmp_path / "updated", tmp_path / "fresh"
    # without headers: with them, "rollo" (one.md's heading) is in half of these 4 leaves, where
    # FTS5's idf (the command line) and tantivy's (the library) part ways (sqlite_lexical.py)
    for store in (updated, fresh):
        assert main(["index", str(folder), "--store", str(store), "--no-headers"]) == 0
        if store == updated:
            (folder / "two.md").write_text(CHANGED)
            assert main(["index", str(folder), "--store", str(updated)]) == 0
    capsys.readouterr()
    answers = []
    for store in (updated, fresh):
        argv = ["query", "Rollo steam", "--store", str(store), "--json", "--max-tokens", "20"]
        assert main([*argv, "--mode", "window"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["results"])
    got = [[(r["text"], r["score"]) for r in answer] for answer in answers]
    docs = [
        d for p in (folder / "one.md", folder / "two.md") for d in read_documents(p, p.read_bytes())
    ]
    memory = SmallToBigRetriever.from_documents(
        docs,
        HashingEmbeddings(),
        mode="multilevel",
        parent_level="section",
        contextual_headers=False,
    )  # hybrid: its BM25 index is filled as it adds
    want = memory.invoke("Rollo steam", mode="window", max_tokens=20)
    assert got[0] == got[1] == [(d.page_content, d.metadata["score"]) for d in want]
    # the heading "# Rollo" matches best: its window, cut to 20 tokens (nothing before it);
    # the steam sentence is evidence too on the query's own scale: its own sentence fits
    assert [d.page_content for d in want] == [
        "# Rollo\n\nRollo led the Normans. ",
        "The steam engine used steam. ",
    ]
