"""The command line's lexical index: SQLite FTS5 in the store's database (issue 20, item 2).

- FTS5 indexes exactly the analyser's terms (its own vocabulary, ``fts5vocab``,
  compared with ``analyze()`` on text in eight scripts);
- its rankings agree with the Python API's tantivy index where BM25's formulas
  agree (one query term: the idf is a common factor), and so do the hybrid answers;
- its scores and rankings equal an independent BM25 with FTS5's idf
  (``tests/reference.py``) on generated leaves and queries;
- a filter restricts the lexical list before ranking;
- its rows are written and rolled back with the nodes and vectors;
- nothing is built when a command opens the store;
- ``verify`` sees a missing or an extra row, and ``--repair`` rebuilds them.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import open_store
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.store import sqlite
from langchain_s2b.store.lexical import lexical_index
from langchain_s2b.store.lexical.analyzer import analyze
from langchain_s2b.store.sqlite.database import Database
from langchain_s2b.store.sqlite.sqlite_lexical import SQLiteLexical, terms_of

from ..reference import bm25

MULTILINGUAL = (
    "दुनिया में स्वागत है। "  # Hindi: vowel signs stay in their word
    "สวัสดีชาวโลก "  # Thai: written without spaces
    "İstanbul'a hoş geldiniz. "  # Turkish: dotted capital I
    "ΟΔΟΣ καλή. "  # Greek: final sigma
    "你好，世界。 "  # Chinese  # noqa: RUF001
    "こんにちは世界、カタカナ。 "  # Japanese
    "مرحبا بالعالم. "  # Arabic
    "Hello, World! The 3 walruses' tusks (ivory) — 42nd street."  # English
)

SENTENCES = {
    "a": ["walrus tusks are long", "the walrus swims", "walrus walrus walrus"],
    "b": ["penguins swim fast", "a walrus met a penguin", "ice is cold"],
    "c": ["seals and walrus and seals", "cold water", "the seals rest"],
}
"""Short sentences: tantivy's field norms are exact for them, as FTS5's lengths are."""


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    file = tmp_path / "animals.jsonl"
    lines = [
        {"id": sid, "text": ". ".join(s.capitalize() for s in text) + ".", "topic": sid}
        for sid, text in SENTENCES.items()
    ]
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return file


@pytest.fixture
def store(tmp_path: Path, rows: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["index", str(rows), "--store", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    return tmp_path / "s"


def _memory(rows: Path) -> SmallToBigRetriever:
    docs = []
    for line in rows.read_text().splitlines():
        row = json.loads(line)
        meta = {k: v for k, v in row.items() if k != "text"}
        docs.append(Document(page_content=row["text"], metadata=meta, id=row["id"]))
    return SmallToBigRetriever.from_documents(
        docs, HashingEmbeddings(), mode="multilevel", parent_level="section"
    )


class TestOneAnalyser:
    def test_fts5_indexes_exactly_the_analysers_terms_in_eight_scripts(self) -> None:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE t USING fts5(terms, tokenize = 'ascii')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
        db.execute("INSERT INTO t (terms) VALUES (?)", (terms_of(MULTILINGUAL),))
        vocabulary = {term for (term,) in db.execute("SELECT term FROM v")}
        assert vocabulary == set(analyze(MULTILINGUAL))
        assert {"दुनिया", "istanbul", "οδοσ", "世", "界", "3", "42nd"} <= vocabulary

    def test_every_indexed_word_is_found_by_a_query_of_it(self, tmp_path: Path) -> None:
        (tmp_path / "many.txt").write_text(MULTILINGUAL)
        assert main(["index", str(tmp_path / "many.txt"), "--store", str(tmp_path / "s")]) == 0
        opened = open_store(tmp_path / "s")
        try:
            lexical = opened.index.lexical_index
            for word in ("दुनिया", "İSTANBUL", "ΟΔΟΣ", "世界", "カタカナ", "بالعالم", "walruses"):
                assert lexical.search_text(word, 5, None), word
        finally:
            opened.close()


class TestRankings:
    @pytest.mark.parametrize("term", ["walrus", "seals", "cold", "penguins", "the"])
    def test_one_term_ranks_as_tantivy_ranks_it(self, store: Path, rows: Path, term: str) -> None:
        """One term: both BM25s are idf x the same tf part (k1 1.2, b 0.75), so the order is
        the same (ties by key) and the scores are in one ratio (tantivy's idf is
        log(1 + x), FTS5's log(x); floats: tantivy's f32)."""
        memory = _memory(rows)
        opened = open_store(store)
        try:
            got = opened.index.lexical_index.search_text(term, 20, None)
        finally:
            opened.close()
        want = memory._io.index.lexical.search(term, 20)  # type: ignore[attr-defined]
        assert [k for k, _ in got] == [k for k, _ in want]
        assert got
        ratios = [a / b for (_, a), (_, b) in zip(got, want, strict=True)]
        assert ratios == pytest.approx([ratios[0]] * len(ratios), rel=1e-5)

    @pytest.mark.parametrize("term", ["walrus", "seals", "cold"])
    def test_hybrid_answers_are_the_in_memory_retrievers(
        self, store: Path, rows: Path, term: str
    ) -> None:
        """Fusion z-scores each list, so a common factor on the lexical scores goes."""
        memory = _memory(rows)
        opened = open_store(store)
        opened.restore(read_only=True)
        try:
            got = opened.retriever.invoke(term, max_tokens=60)
        finally:
            opened.close()
        want = memory.invoke(term, max_tokens=60)
        assert [_shape(d) for d in got] == [_shape(d) for d in want]
        assert [d.metadata["fused_score"] for d in got] == pytest.approx(
            [d.metadata["fused_score"] for d in want], rel=1e-5
        )

    def test_terms_in_half_the_leaves_are_left_out_without_changing_the_ranking(
        self, store: Path
    ) -> None:
        opened = open_store(store)
        try:
            lexical = opened.index.lexical_index
            with opened.db.read() as conn:
                leaves = lexical._leaves(conn)
                assert leaves == conn.execute("SELECT count(*) FROM children").fetchone()[0]
                assert lexical._rare(conn, ["walrus", "seals", "the"]) == ["seals", "the"]
                assert lexical._rare(conn, ["walrus"]) == ["walrus"]  # never none
            pruned = lexical.search_text("walrus seals", 3, None)
            full = lexical._search(["walrus", "seals"], 3, "", [])  # what FTS5 ranks whole
            assert [k for k, _ in pruned] == [k for k, _ in full]
            assert [s for _, s in pruned] == pytest.approx([s for _, s in full], abs=1e-5)
            found = lexical.search_text("walrus cold", 9, None)  # 2 cold: walrus put back
            assert [k for k, _ in found[:2]] == ["c/sentence/1", "b/sentence/2"]
            assert len(found) == 7  # 2 cold, 5 walrus leaves
        finally:
            opened.close()

    def test_a_filter_selects_before_ranking(self, store: Path) -> None:
        opened = open_store(store)
        try:
            lexical = opened.index.lexical_index
            everywhere = lexical.search_text("walrus", 2, None)
            only_c = lexical.search_text("walrus", 2, {"topic": "c"})
            per_leaf = lexical.search_text("walrus", 2, {"start": {"$gte": 1}})
        finally:
            opened.close()
        assert [k.split("/")[0] for k, _ in everywhere] == ["a", "a"]  # a's dominate
        assert [k for k, _ in only_c] == ["c/sentence/0"]  # the one c leaf, not none
        assert len(per_leaf) == 2
        assert all(not k.endswith("/sentence/0") or k.startswith("b") for k, _ in per_leaf)


def _shape(doc: Document) -> tuple[Any, ...]:
    m = doc.metadata
    return (m["source_id"], m["start"], m["end"], doc.page_content, round(m["score"], 5))


class TestOneCommit:
    def test_rows_are_rolled_back_with_the_nodes(
        self, store: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        opened = open_store(store, writer=True, search=False)
        before = _lexical_rows(store)
        real = sqlite.SQLiteDocStore.mset

        def fail_on_manifest(self: Any, pairs: Any) -> None:
            if any(key.endswith("/manifest") for key, _ in pairs):
                msg = "disk full"
                raise OSError(msg)
            real(self, pairs)

        monkeypatch.setattr(sqlite.SQLiteDocStore, "mset", fail_on_manifest)

        def add() -> None:
            with opened.db.write():
                opened.restore()
                opened.retriever.add_documents([Document("Narwhals have tusks.", id="n")])

        try:
            with pytest.raises(OSError, match="disk full"):
                add()
        finally:
            opened.close()
        assert _lexical_rows(store) == before
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            assert db.execute("SELECT count(*) FROM nodes WHERE key LIKE 'n/%'").fetchone() == (0,)

    def test_a_leaf_is_written_with_its_row(self, store: Path) -> None:
        opened = open_store(store, writer=True, search=False)
        try:
            with opened.db.write():
                opened.restore()
                opened.retriever.add_documents([Document("Narwhals have tusks.", id="n")])
                opened.retriever.delete(["a"])
        finally:
            opened.close()
        rows = _lexical_rows(store)
        assert ("n/sentence/0", "narwhals have tusks") in rows
        assert not [k for k, _ in rows if k.startswith("a/")]
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            children = db.execute("SELECT row, key FROM children ORDER BY row").fetchall()
            lexical = db.execute("SELECT rowid, key FROM lexical ORDER BY rowid").fetchall()
        assert children == lexical


def _lexical_rows(store: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
        return sorted(db.execute("SELECT key, terms FROM lexical").fetchall())


class TestOpening:
    def test_a_query_builds_nothing(
        self, store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        made: list[str] = []
        real_build = sqlite.SQLiteFaissIndex.build

        def count_build(self: Any) -> None:
            made.append("faiss")
            real_build(self)

        monkeypatch.setattr(sqlite.SQLiteFaissIndex, "build", count_build)
        monkeypatch.setattr(
            lexical_index.LexicalIndex, "__init__", lambda *a, **k: made.append("bm25")
        )
        real_add, real_search = sqlite.SQLiteLexical.add, sqlite.SQLiteLexical.search_text
        monkeypatch.setattr(
            sqlite.SQLiteLexical, "add", lambda *a, **k: (made.append("fts5"), real_add(*a, **k))
        )
        searched: list[str] = []
        monkeypatch.setattr(
            sqlite.SQLiteLexical,
            "search_text",
            lambda self, q, n, f: (searched.append(q), real_search(self, q, n, f))[1],
        )
        for extra in ([], ["--max-tokens", "60"], ["--mode", "multilevel"]):
            assert main(["query", "walrus tusks", "--store", str(store), *extra]) == 0
        assert "walrus" in capsys.readouterr().out.lower()
        assert made == []  # the FAISS file of the last commit, the FTS5 table: read, not built
        assert searched == ["walrus tusks"] * 3  # every query ranks with FTS5 too (hybrid)

    def test_a_store_without_the_file_of_its_commit_builds_it_once(
        self, store: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        for file in store.glob("s2b.*.faiss"):
            file.unlink()
        opened = open_store(store)
        try:
            assert opened.restore(read_only=True) is True
        finally:
            opened.close()
        assert len(list(store.glob("s2b.*.faiss"))) == 1
        opened = open_store(store)
        try:
            assert opened.restore(read_only=True) is False
        finally:
            opened.close()

    def test_a_commit_makes_the_file_of_the_state_before_it_stale(
        self, store: Path, rows: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (before,) = store.glob("s2b.*.faiss")
        rows.write_text(rows.read_text() + json.dumps({"id": "d", "text": "Orcas hunt."}) + "\n")
        assert main(["index", str(rows), "--store", str(store)]) == 0
        (after,) = store.glob("s2b.*.faiss")
        assert after != before
        assert "Orcas" in _query(capsys, store, "orcas")

    def test_an_older_store_is_refused_by_a_reader_and_upgraded_by_a_writer(
        self, store: Path, rows: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _make_schema_2(store)
        assert main(["query", "walrus", "--store", str(store)]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"s2b: error: the index in {store} was made by an older s2b; bring it up to date "
            f"once (nothing is embedded again): s2b verify --repair --store {store}\n"
        )
        assert main(["verify", "--store", str(store), "--repair"]) == 0
        assert "ok" in capsys.readouterr().out
        assert "Walrus" in _query(capsys, store, "walrus")
        assert _lexical_rows(store)


def _query(capsys: pytest.CaptureFixture[str], store: Path, question: str) -> str:
    capsys.readouterr()
    assert main(["query", question, "--store", str(store), "--max-chars", "0"]) == 0
    return capsys.readouterr().out


def _make_schema_2(store: Path) -> None:
    """The store as s2b wrote it before leaves had row numbers (schema 2)."""
    for file in store.glob("s2b.*.faiss"):
        file.unlink()
    with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
        db.executescript(
            """
            CREATE TABLE old (key TEXT PRIMARY KEY, vec INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO old SELECT key, vec FROM children;
            DROP TABLE children;
            ALTER TABLE old RENAME TO children;
            DROP TABLE lexical;
            DELETE FROM meta WHERE name IN ('commit', 'database');
            UPDATE meta SET value = '1' WHERE name = 'schema';
            """
        )


class TestVerify:
    def test_a_missing_and_an_extra_row_are_seen_and_repaired(
        self, store: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            db.execute("DELETE FROM lexical WHERE key = 'b/sentence/1'")
            db.execute(
                "INSERT INTO lexical (rowid, terms, key, source) "
                "VALUES (999, 'x', 'z/sentence/0', 'z')"
            )
            db.commit()
        assert main(["verify", "--store", str(store)]) == 1
        out = capsys.readouterr().out
        assert (
            "1 chunk(s) missing from the lexical index, 1 lexical index row(s) of no chunk" in out
        )
        assert main(["verify", "--store", str(store), "--repair"]) == 0
        capsys.readouterr()
        assert main(["verify", "--store", str(store)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "ok"
        keys = {k for k, _ in _lexical_rows(store)}
        assert "b/sentence/1" in keys
        assert "z/sentence/0" not in keys
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            assert (
                db.execute("SELECT count(*) FROM lexical").fetchone()
                == db.execute("SELECT count(*) FROM children").fetchone()
            )

    def test_the_commit_counter_counts_only_what_a_search_sees(self, store: Path) -> None:
        db = Database(store / "s2b.sqlite")
        try:
            first = db.stamp()
            with db.write(changes=False):
                db.insert_vectors([(b"h" * 16, b"\0" * 1024)])
            assert db.stamp() == first
            with db.write():
                pass  # nothing written: no change
            assert db.stamp() == first
            with db.write() as conn:
                conn.execute("DELETE FROM files")
            assert first is not None
            assert db.stamp() == (first[0], first[1] + 1)
        finally:
            db.close()


WORDS = ["walrus", "seal", "ice", "cold", "the", "swims", "tusk", "penguin"]


class TestReference:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        leaves=st.lists(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=9), min_size=1, max_size=14
        ),
        query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
        n=st.integers(1, 6),
    )
    def test_scores_and_ranking_are_bm25_with_fts5s_idf(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        leaves: list[list[str]],
        query: list[str],
        n: int,
    ) -> None:
        """Every leaf a term of the query is in; best first, ties by key; scores to 1e-5.

        FTS5 leaves a term held by half of the leaves or more out of the search
        while another term finds ``n`` leaves: it adds at most 2.2e-6 to a
        score, so only scores within 1e-5 of each other may swap (assumed away).
        """
        db = Database(tmp_path_factory.mktemp("fts5") / "x.sqlite")
        db.create_tables()
        lexical = SQLiteLexical(db, lambda flt: None, lambda keys: [None] * len(keys))
        texts = {f"s{i:02d}/leaf/{i}": " ".join(words) for i, words in enumerate(leaves)}
        with db.write() as conn:
            lexical.add(conn, list(range(len(texts))), list(texts), list(texts.values()))
        got = lexical.search_text(" ".join(query), n, None)
        db.conn.close()
        scores = bm25(query, {k: analyze(t) for k, t in texts.items()}, idf_of="fts5")
        ranked = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
        values = sorted({round(v, 9) for v in scores.values()})
        assume(all(b - a > 1e-5 for a, b in itertools.pairwise(values)))
        want = ranked[:n]
        assert [k for k, _ in got] == [k for k, _ in want]
        assert [v for _, v in got] == pytest.approx([v for _, v in want], abs=1e-5)
