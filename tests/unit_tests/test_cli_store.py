"""The s2b store: one SQLite database, transactions, the writer lock, real second processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore
from langchain_tests.integration_tests import BaseStoreSyncTests

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import open_store, writer_lock
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.sqlite import (
    CachedEmbeddings,
    Database,
    SQLiteDocStore,
    text_hash,
)
from langchain_s2b.store.vectors.faiss_index import FaissIndex

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
ENV = {**os.environ, cli.EMBEDDING_ENV: "fake", "PYTHONPATH": str(Path(__file__).parents[2])}


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


def _articles() -> list[Document]:
    with (DATA / "articles.jsonl").open() as fh:
        rows = [json.loads(line) for line in fh]
    return [
        Document(page_content=r["text"], metadata={"title": r["title"]}, id=r["id"]) for r in rows
    ]


def _s2b(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "langchain_s2b", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def _corpus(root: Path, name: str, sentences: list[str]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    for i, sentence in enumerate(sentences):
        (folder / f"{name}{i}.txt").write_text(sentence + "\n")
    return folder


class TestDocStore:
    def test_nodes_come_back_exactly_as_an_in_memory_store_holds_them(self, tmp_path: Path) -> None:
        db = Database(tmp_path / "x.sqlite")
        db.create_tables()
        docs = _articles()
        emb = HashingEmbeddings()
        memory = SmallToBigRetriever(
            vectorstore=FaissIndex(emb), docstore=InMemoryStore(), mode="multilevel"
        )
        memory.add_documents(docs)
        sqlite = SQLiteDocStore(db)
        on_disk = SmallToBigRetriever(
            vectorstore=FaissIndex(emb), docstore=sqlite, mode="multilevel"
        )
        on_disk.add_documents(docs)
        keys = sorted(memory.docstore.yield_keys())
        assert sorted(sqlite.yield_keys()) == keys
        assert sqlite.mget(keys) == memory.docstore.mget(keys)
        text_rows = db.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
        assert text_rows == 2 * len(docs)  # the doc node and the manifest of each source

    def test_a_foreign_document_is_kept_whole(self, tmp_path: Path) -> None:
        db = Database(tmp_path / "x.sqlite")
        db.create_tables()
        store = SQLiteDocStore(db)
        odd = Document(page_content="not a slice", metadata={"start": 0, "end": 3}, id="x")
        store.mset([("src/sentence/0", odd), ("plain key", Document(page_content="p"))])
        assert store.mget(["src/sentence/0", "plain key", "nope"]) == [
            odd,
            Document(page_content="p"),
            None,
        ]

    def test_what_would_not_come_back_equal_is_kept_whole(self, tmp_path: Path) -> None:
        db = Database(tmp_path / "x.sqlite")
        db.create_tables()
        store = SQLiteDocStore(db)
        source = Document(page_content="Hello world.", metadata={"source_id": "s"}, id="s/doc/0")
        span = {"source_id": "s", "source_key": "s", "level": "sentence", "split_id": 0}
        span |= {"start": 0, "end": 5, "split_idx_start": 0}
        sliced = Document(page_content="Hello", metadata=span, id="s/sentence/0")
        no_id = Document(page_content="Hello", metadata=span)
        store.mset([("s/doc/0", source), ("s/sentence/0", sliced), ("s/sentence/1", no_id)])
        store.mset([("k", Document(page_content="first")), ("k", Document(page_content="last"))])
        assert store.mget(["s/sentence/0", "s/sentence/1", "k"]) == [
            sliced,
            no_id,
            Document(page_content="last"),
        ]
        rows = db.conn.execute("SELECT key FROM nodes").fetchall()
        assert rows == [("s/sentence/0",)]  # the slice; the others are whole rows

    def test_a_failed_transaction_leaves_nothing(self, tmp_path: Path) -> None:
        db = Database(tmp_path / "x.sqlite")
        db.create_tables()
        store = SQLiteDocStore(db)

        def fail_after_writing() -> None:
            with db.write():
                store.mset([("a", Document(page_content="a"))])
                raise RuntimeError

        with pytest.raises(RuntimeError):
            fail_after_writing()
        assert list(store.yield_keys()) == []

    def test_vectors_are_embedded_once_per_distinct_text(self, tmp_path: Path) -> None:
        class Counting(HashingEmbeddings):
            def __init__(self) -> None:
                super().__init__()
                self.seen: list[str] = []

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                self.seen += texts
                return super().embed_documents(texts)

        db = Database(tmp_path / "x.sqlite")
        db.create_tables()
        model = Counting()
        cache = CachedEmbeddings(model, db)
        first = cache.embed_documents(["bb b", "a", "bb b"])
        assert model.seen == ["a", "bb b"]  # distinct, shortest first
        again = cache.embed_documents(["a", "bb b"])
        assert model.seen == ["a", "bb b"]
        assert again == [first[1], first[0]]
        assert cache.lookup([text_hash("a")]) == {text_hash("a"): 1}


class TestOnDisk:
    def test_size_is_within_five_times_the_text_plus_the_vectors(self, tmp_path: Path) -> None:
        store = tmp_path / "s"
        assert main(["index", str(DATA / "articles.jsonl"), "--store", str(store)]) == 0
        text = sum(len(d.page_content.encode()) for d in _articles())
        with _DB(store) as db:
            vectors = db.conn.execute("SELECT sum(length(vec)) FROM vectors").fetchone()[0]
        assert vectors == 578 * 256 * 4  # 578 sentences, 256 float32 each (the fake model)
        size = (store / "s2b.sqlite").stat().st_size
        # the text once, and its terms again in the lexical index (FTS5: terms and postings)
        assert size <= 8 * text + vectors, (size, text, vectors)

    def test_a_reopened_store_answers_like_the_in_memory_retriever(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "s"
        assert main(["index", str(DATA / "articles.jsonl"), "--store", str(store)]) == 0
        memory = SmallToBigRetriever.from_documents(
            _reference_docs(), HashingEmbeddings(), mode="multilevel", parent_level="section"
        )
        opened = open_store(store)
        opened.restore()
        dense = {"hybrid": False}  # multilevel's budget fuses BM25 (FTS5 vs tantivy: test_fts5)
        for mode in ("parent", "window", "multilevel"):
            question = "Who was the leader of the Normans?"
            got = opened.retriever.model_copy(update=dense).invoke(question, mode=mode)
            assert got == memory.model_copy(update=dense).invoke(question, mode=mode)
            assert len(got) == 4 or mode == "multilevel"
        opened.close()


def _reference_docs() -> list[Document]:
    with (DATA / "articles.jsonl").open() as fh:
        rows = [json.loads(line) for line in fh]
    return [
        Document(
            page_content=r["text"], metadata={k: v for k, v in r.items() if k != "text"}, id=r["id"]
        )
        for r in rows
    ]


class _DB:
    def __init__(self, store: Path) -> None:
        self.db = Database(store / "s2b.sqlite")

    def __enter__(self) -> Database:
        return self.db

    def __exit__(self, *exc: object) -> None:
        self.db.close()


class TestConcurrency:
    def test_a_second_writer_waits_for_the_first(self, tmp_path: Path) -> None:
        folder = _corpus(tmp_path, "a", ["Zebras have stripes.", "Lions roar loudly."])
        store = tmp_path / "s"
        with writer_lock(store, wait=False):
            second = _s2b("index", str(folder), "--store", str(store))
            assert second.stderr is not None
            line = second.stderr.readline()
            assert line == f"s2b: waiting for another s2b run to finish writing {store} ...\n"
            assert second.poll() is None  # still waiting
        out, err = second.communicate(timeout=120)
        assert (second.returncode, err) == (0, "")
        assert out.startswith(f"indexed 2 file(s) into {store}: 2 added")

    def test_a_second_writer_waits_while_the_first_creates_the_store(self, tmp_path: Path) -> None:
        """The first run holds the lock and has written part of a new store (no database yet):
        the second waits for it, and does not call the folder a non-empty foreign directory."""
        folder = _corpus(tmp_path, "a", ["Zebras have stripes.", "Lions roar loudly."])
        store = tmp_path / "s"
        with writer_lock(store, wait=False):
            (store / "s2b.sqlite-journal").write_bytes(b"")  # the first run, midway
            second = _s2b("index", str(folder), "--store", str(store))
            assert second.stderr is not None
            line = second.stderr.readline()
            assert line == f"s2b: waiting for another s2b run to finish writing {store} ...\n"
            (store / "s2b.sqlite-journal").unlink()  # it ended without a store (undone)
        out, err = second.communicate(timeout=120)
        assert (second.returncode, err) == (0, "")
        assert out.startswith(f"indexed 2 file(s) into {store}: 2 added")

    def test_no_wait_says_the_store_is_in_use_in_one_line(self, tmp_path: Path) -> None:
        folder = _corpus(tmp_path, "a", ["Zebras have stripes."])
        store = tmp_path / "s"
        with writer_lock(store, wait=False):
            run = _s2b("index", str(folder), "--store", str(store), "--no-wait")
            out, err = run.communicate(timeout=120)
        assert (run.returncode, out) == (1, "")
        assert err == (
            f"s2b: error: {store} is in use by another s2b run that writes to it; "
            "try again when it ends (or leave out --no-wait to wait)\n"
        )

    def test_two_indexers_at_once_lose_nothing(self, tmp_path: Path) -> None:
        a = _corpus(tmp_path, "a", [f"Alpha fact number {i} about zebras." for i in range(30)])
        b = _corpus(tmp_path, "b", [f"Beta fact number {i} about lions." for i in range(30)])
        store = tmp_path / "s"
        runs = [
            _s2b("index", str(a), "--store", str(store)),
            _s2b("index", str(b), "--store", str(store)),
        ]
        for run in runs:
            _, err = run.communicate(timeout=300)
            assert run.returncode == 0, err
        again = [_s2b("index", str(a), str(b), "--store", str(store)) for _ in range(2)]
        outs = [run.communicate(timeout=300)[0] for run in again]
        assert outs == [f"nothing to do: all 60 file(s) unchanged in {store}\n"] * 2
        check = _s2b("verify", "--store", str(store))
        out, _ = check.communicate(timeout=120)
        assert out == ("60 file(s), 60 document(s), 60 chunk(s), 60 vector(s), 240 node(s)\nok\n")

    def test_a_reader_sees_the_last_commit_while_a_writer_is_in_its_transaction(
        self, tmp_path: Path
    ) -> None:
        folder = _corpus(tmp_path, "a", ["Zebras have black and white stripes."])
        store = tmp_path / "s"
        assert main(["index", str(folder), "--store", str(store)]) == 0
        writer = open_store(store)
        writer.restore()
        with writer.db.write():
            writer.retriever.delete([str(folder / "a0.txt")])
            writer.retriever.add_documents([Document(page_content="Lions roar.", id="lions")])
            reader = _s2b("query", "zebras stripes", "--store", str(store), "--json")
            out, err = reader.communicate(timeout=120)
            assert (reader.returncode, err) == (0, "")
            texts = [r["text"] for r in json.loads(out)["results"]]
            assert texts == ["Zebras have black and white stripes.\n"]
        writer.close()
        reader = _s2b("query", "zebras stripes", "--store", str(store), "--json")
        out, _ = reader.communicate(timeout=120)
        assert [r["text"] for r in json.loads(out)["results"]] == ["Lions roar."]


VALUES = (
    Document("foo", metadata={"n": 1, "tags": ["a", "b"]}, id="k/child/0"),
    Document("bar \u05e9\u05dc\u05d5\u05dd \x00 \ud800", metadata={"t": "\ud800"}, id=None),
    Document("", metadata={"nested": {"x": [1.5, None, True]}}, id="k/doc/0"),
)


class TestSQLiteDocStoreSuite(BaseStoreSyncTests[Document]):
    """LangChain's standard store suite against the s2b docstore."""

    @pytest.fixture
    def kv_store(self, tmp_path: Path) -> SQLiteDocStore:
        db = Database(tmp_path / "suite.sqlite")
        db.create_tables()
        return SQLiteDocStore(db)

    @pytest.fixture
    def three_values(self) -> tuple[Document, Document, Document]:
        return VALUES


def test_a_first_run_that_died_before_its_first_commit_is_started_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s"
    store.mkdir()
    Database(store / "s2b.sqlite").close()  # the file exists, no table was committed
    (tmp_path / "a.txt").write_text("Zebras have stripes.\n")
    assert main(["query", "q", "--store", str(store)]) == 1
    assert capsys.readouterr().err == (
        f"s2b: error: {store / 's2b.sqlite'} is empty: the first s2b index run into it "
        "has not finished\n"
    )
    assert main(["index", str(tmp_path / "a.txt"), "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith(f"indexed 1 file(s) into {store}: 1 added")
