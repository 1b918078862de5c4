"""The command line at the edges (issue 22): hostile names, bad rows, damaged PDFs and stores.

One bad file never stops a run, damage is always detected (and mended from the
files), a full disk is one line, and every count means the same everywhere. The
hostile names and damaged files are made here, in ``tmp_path``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import models, progress
from langchain_s2b.cli.commands import main
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.store.sqlite import text_hash, vector_digest

from .test_cli_files import _pdf

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, cli.EMBEDDING_ENV: "fake", "PYTHONPATH": str(ROOT)}
GUIDE = "Search small, return big. Small chunks match a query; their parents answer it.\n"
TIMING = re.compile(r"done in \d+\.\d s: \d+ chunk\(s\), [\d.]+ a second")


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _lines(out: str) -> list[str]:
    """Output lines without the timing line (its numbers change from run to run)."""
    return [line for line in out.splitlines() if not TIMING.fullmatch(line)]


def _texts(capsys: pytest.CaptureFixture[str], store: Path, question: str, k: int = 4) -> list:
    code, out, err = _run(capsys, "query", question, "--store", str(store), "--json", "-k", str(k))
    assert (code, err) == (0, ""), err
    return [(r["source"], r["text"]) for r in json.loads(out)["results"]]


def _tables(store: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the store's database, table by table."""
    with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall()) for n in names}


def _overwrite(store: Path, old: bytes, new: bytes) -> None:
    """Replace bytes in the database file in place, as a damaged disk would."""
    path = store / "s2b.sqlite"
    data = path.read_bytes()
    assert data.count(old) == 1, data.count(old)
    path.write_bytes(data.replace(old, new))


# 1. A file name that is not UTF-8 ----------------------------------------------------------


class TestHostileNames:
    def test_a_name_that_is_not_utf8_is_skipped_and_named_and_the_rest_is_indexed(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "x", tmp_path / "s"
        docs.mkdir()
        (docs / "README.md").write_text(GUIDE)
        bad = os.fsencode(docs) + b"/bad\xffname.txt"
        with open(bad, "wb") as fh:
            fh.write(b"text.\n")
        for run in range(2):  # every later run too
            code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
            assert code == 3
            assert err.splitlines() == [
                f"s2b: skipped {docs}/bad\\xffname.txt: its name is not UTF-8 (the index keeps "
                "names as text); rename it",
                "s2b: 1 file(s) could not be read and were skipped",
            ]
            first = (
                f"indexed 1 file(s) into {store}: 1 added, 0 updated, 0 removed, 0 unchanged; "
                "1 document(s), 2 chunk(s), 2 vector(s) (2 embedded, 0 reused)"
                if run == 0
                else f"nothing to do: all 1 file(s) unchanged in {store}"
            )
            assert _lines(out) == [first, "skipped 1 file(s): 1 unreadable"]
        assert _texts(capsys, store, "search small", k=1) == [("README", GUIDE)]

    def test_lone_surrogates_in_rows_and_a_page_that_looks_like_a_url(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "x", tmp_path / "s"
        docs.mkdir()
        (docs / "rows.jsonl").write_text('{"id": "a\\ud800b", "text": "Lone \\udc00 wombats."}\n')
        (docs / "url.html").write_text("http://example.com/page.html")  # bs4 warned about it
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert (code, err) == (0, "")
        code, out, err = _run(capsys, "query", "wombats", "--store", str(store), "-k", "1")
        assert (code, err) == (0, "")
        assert out.splitlines()[1] == "**Lone \ufffd wombats.**"
        code, out, err = _run(
            capsys, "query", "wombats", "--store", str(store), "-k", "1", "--json"
        )
        assert (code, err) == (0, "")
        assert '"text": "Lone \\udc00 wombats."' in out
        assert json.loads(out)["results"][0]["text"] == "Lone \udc00 wombats."


# 2. Problems inside one JSONL file --------------------------------------------------------


def _rst_folder(root: Path, count: int) -> Path:
    root.mkdir()
    for i in range(count):
        (root / f"page{i}.rst").write_text(f"Page {i}\n=======\n\nWalruses number {i} dive.\n")
    return root


class TestJsonl:
    def test_rows_repeated_without_ids_are_kept_once_and_nothing_else_is_lost(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = _rst_folder(tmp_path / "docs", 3), tmp_path / "s"
        row = {"text": "Penguins huddle in the cold."}
        lines = [row, row, {"text": "Seals bask on rocks."}]
        (docs / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert (code, err) == (0, "")
        assert _lines(out) == [
            f"indexed 4 file(s) into {store}: 4 added, 0 updated, 0 removed, 0 unchanged; "
            "5 document(s), 8 chunk(s), 8 vector(s) (8 embedded, 0 reused)"
        ]
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert f"{docs / 'rows.jsonl'}  2 document(s), 2 chunk(s)" in out.splitlines()
        assert _texts(capsys, store, "penguins huddle", k=1)[0][1] == row["text"]

    def test_a_nan_skips_its_file_only(self, tmp_path: Path, capsys) -> None:
        docs, store = _rst_folder(tmp_path / "docs", 2), tmp_path / "s"
        (docs / "frame.jsonl").write_text('{"text": "Otters hold hands.", "weight": NaN}\n')
        (docs / "inf.jsonl").write_text('{"text": "Voles dig.", "size": -Infinity}\n')
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 3
        assert err.splitlines() == [
            f"s2b: skipped {docs / 'frame.jsonl'}: line 1: NaN is not a JSON value "
            "(write null, or a number)",
            f"s2b: skipped {docs / 'inf.jsonl'}: line 1: -Infinity is not a JSON value "
            "(write null, or a number)",
            "s2b: 2 file(s) could not be read and were skipped",
        ]
        assert _lines(out)[0].startswith(f"indexed 2 file(s) into {store}: 2 added")

    def test_a_row_shared_by_two_files_is_stored_once_and_stays_while_one_holds_it(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        shared = {"id": "fuji", "text": "Mount Fuji is the highest mountain in Japan."}
        (docs / "a.jsonl").write_text(json.dumps(shared) + "\n")
        (docs / "b.jsonl").write_text(
            json.dumps(shared) + "\n" + json.dumps({"id": "etna", "text": "Etna erupts."}) + "\n"
        )
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert (code, err) == (0, "")
        assert _lines(out) == [
            f"indexed 2 file(s) into {store}: 2 added, 0 updated, 0 removed, 0 unchanged; "
            "2 document(s), 2 chunk(s), 2 vector(s) (2 embedded, 0 reused)"
        ]
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert out.splitlines()[:3] == [
            f"{docs / 'a.jsonl'}  1 document(s), 1 chunk(s)",
            f"{docs / 'b.jsonl'}  2 document(s), 2 chunk(s)",
            f"2 file(s), 2 document(s), 2 chunk(s), 2 vector(s) in {store}",
        ]
        (docs / "a.jsonl").unlink()
        code, out, _ = _run(capsys, "index", str(docs), "--store", str(store))
        assert _lines(out)[0].startswith(
            f"indexed 1 file(s) into {store}: 0 added, 0 updated, 1 removed"
        )
        assert _texts(capsys, store, "Mount Fuji", k=1) == [("fuji", shared["text"])]
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert out.splitlines() == [
            "1 file(s), 2 document(s), 2 chunk(s), 2 vector(s), 8 node(s)",
            "ok",
        ]

    def test_one_id_with_two_texts_skips_the_file_that_says_it_second(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "a.jsonl").write_text('{"id": "x", "text": "Alpha."}\n')
        (docs / "b.jsonl").write_text(
            '{"id": "x", "text": "Beta."}\n{"id": "y", "text": "Gamma."}\n'
        )
        (docs / "c.jsonl").write_text('{"text": "Delta."}\n{"text": "Delta.", "n": 2}\n')
        (docs / "d.jsonl").write_text('{"id": "z", "text": "Zeta.", "level": "easy"}\n')
        code, _, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 3
        assert err.splitlines() == [
            f"s2b: skipped {docs / 'c.jsonl'}: lines 1 and 2 have the same text and no id but "
            "differ; give each its own id",
            f"s2b: skipped {docs / 'd.jsonl'}: line 1: field(s) 'level' are s2b's own (every "
            "chunk carries ancestors, children, end, heading, leaf_context, level, parent_id, "
            "source_id, source_key, source_splits, split_id, split_idx_start, start); rename them",
            f"s2b: skipped {docs / 'b.jsonl'}: document id 'x' is also in {docs / 'a.jsonl'}, "
            "with other text or metadata",
            "s2b: 3 file(s) could not be read and were skipped",
        ]


# 3. Damaged PDFs and PDFs without text --------------------------------------------------


class TestPdf:
    def test_damaged_and_image_only_pdfs_are_named_in_one_line_each(self, tmp_path: Path) -> None:
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "good.pdf").write_bytes(_pdf(["Wombats dig burrows."]))
        (docs / "image.pdf").write_bytes(_pdf([""]))  # a page without a text layer
        broken = bytearray(_pdf(["Koalas sleep all day.", "Kangaroos jump far."]))
        broken[0:200] = bytes(200)
        (docs / "broken.pdf").write_bytes(bytes(broken))
        torn = bytearray(_pdf(["Koalas sleep all day.", "Kangaroos jump far."]))
        torn[150:350] = bytes(200)  # the first page's objects: pypdf repairs what it can
        (docs / "torn.pdf").write_bytes(bytes(torn))
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "langchain_s2b",
                "index",
                str(docs),
                "--store",
                str(tmp_path / "s"),
            ],
            capture_output=True,
            text=True,
            env=ENV,
            check=False,
        )
        assert run.returncode == 3
        assert run.stderr.splitlines() == [
            f"s2b: skipped {docs / 'broken.pdf'}: not a readable PDF (Cannot find Root object "
            "in pdf)",
            f"s2b: skipped {docs / 'image.pdf'}: no text in its 1 page(s): a scan or images "
            "without a text layer (run OCR first), or a damaged PDF",
            f"s2b: note: {docs / 'torn.pdf'}: the PDF reader reported 4 problem(s) (first: "
            "Ignoring wrong pointing object 4 0 (offset 296)); its text may be incomplete",
            "s2b: 2 file(s) could not be read and were skipped",
        ]
        assert _lines(run.stdout) == [
            f"indexed 2 file(s) into {tmp_path / 's'}: 2 added, 0 updated, 0 removed, "
            "0 unchanged; 2 document(s), 2 chunk(s), 2 vector(s) (2 embedded, 0 reused)",
            "skipped 2 file(s): 2 unreadable",
        ]


# 4. and 5. Damage in the store: detected by verify, mended by verify --repair -------------


@pytest.fixture
def guide_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    docs, store = tmp_path / "docs", tmp_path / "s"
    docs.mkdir()
    (docs / "guide.md").write_text(GUIDE)
    (docs / "other.md").write_text("Walruses dive for clams. They surface to breathe.\n")
    assert main(["index", str(docs), "--store", str(store)]) == 0
    capsys.readouterr()
    return docs, store


HEALTHY = "2 file(s), 2 document(s), 4 chunk(s), 4 vector(s), 10 node(s)"


class TestDamageIsDetected:
    def test_text_overwritten_with_the_same_length_is_found_and_read_again_from_the_file(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        clean = _tables(store)
        _overwrite(store, b"Search small, return big", b"Search large, return one")
        code, out, err = _run(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()) == (
            1,
            [
                HEALTHY,
                "damaged: 1 chunk(s) without their vector, "
                "1 document(s) whose text, metadata or manifest changed",
            ],
        )
        assert err == f"s2b: error: {store} is damaged; run: s2b verify --repair --store {store}\n"
        code, out, err = _run(capsys, "verify", "--store", str(store), "--repair")
        assert (code, err) == (0, "")
        assert out.splitlines()[-1] == (
            "repaired: 0 document(s) rebuilt from their stored text, 1 removed, "
            "1 damaged row(s) and 0 orphan(s) deleted; 1 file(s) read again from disk"
        )
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]
        assert _texts(capsys, store, "search small", k=1) == [("guide", GUIDE)]
        assert _rows_without_keys(_tables(store)) == _rows_without_keys(clean)

    def test_vector_bytes_overwritten_are_found_and_embedded_again(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        clean = _tables(store)
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            vec = db.execute("SELECT vec FROM vectors WHERE id = 2").fetchone()[0]
        changed = bytearray(vec)
        changed[64:128] = bytes(range(64))  # 64 bytes inside one vector
        _overwrite(store, vec, bytes(changed))
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()[1]) == (
            1,
            "damaged: 1 vector(s) whose bytes changed, 1 chunk(s) without their vector",
        )
        code, out, _ = _run(capsys, "verify", "--store", str(store), "--repair")
        assert code == 0
        assert out.splitlines()[-1] == (
            "repaired: 1 document(s) rebuilt from their stored text, 0 removed, "
            "2 damaged row(s) and 0 orphan(s) deleted; 0 file(s) read again from disk"
        )
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]
        assert _vectors(_tables(store)) == _vectors(clean)  # the same vectors, embedded again

    def test_a_manifest_whose_digest_changed_is_found(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            meta = db.execute("SELECT meta FROM docs WHERE key LIKE '%guide%/manifest'").fetchone()[
                0
            ]
        digest = re.search(rb'"digest":"([0-9a-f]{64})"', meta).group(1)  # type: ignore[union-attr]
        _overwrite(store, digest, digest[::-1])
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()[1]) == (
            1,
            "damaged: 1 document(s) whose text, metadata or manifest changed",
        )
        assert _run(capsys, "verify", "--store", str(store), "--repair")[0] == 0
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]

    def test_a_node_whose_span_changed_is_rebuilt_from_the_stored_text(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            db.execute("UPDATE nodes SET stop = stop - 1 WHERE key LIKE '%guide%/sentence/0'")
            db.commit()
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()[1]) == (
            1,
            "damaged: 1 chunk(s) without their vector, 1 document(s) with changed nodes",
        )
        code, out, _ = _run(capsys, "verify", "--store", str(store), "--repair")
        assert code == 0
        assert "1 document(s) rebuilt from their stored text" in out
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]

    def test_a_damaged_database_file_is_indexed_again_into_a_new_one(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        clean = _tables(store)
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'nodes'").fetchone()
            size = db.execute("PRAGMA page_size").fetchone()[0]
        data = bytearray((store / "s2b.sqlite").read_bytes())
        data[(root[0] - 1) * size] = 0xFF  # the b-tree page's type: no valid page has it
        (store / "s2b.sqlite").write_bytes(bytes(data))
        code, out, err = _run(capsys, "verify", "--store", str(store))
        assert code == 1
        assert out == "damaged: 1 problem(s) in the database file\n"
        assert err.startswith(f"s2b: error: the database file in {store} is damaged (")
        assert err.endswith(
            f"); run: s2b verify --repair --store {store} "
            "(it indexes the files again into a new database file)\n"
        )
        code, out, err = _run(capsys, "verify", "--store", str(store), "--repair")
        assert (code, err) == (0, "")
        (aside,) = store.glob("s2b.sqlite.damaged-*")
        assert out.splitlines()[-2:] == [
            "rebuilt: 2 file(s) indexed again into a new database file "
            "(4 vector(s) kept from the damaged one, 0 embedded)",
            f"the damaged database file is kept as {aside}",
        ]
        assert aside.read_bytes() == bytes(data)
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]
        assert _rows_without_keys(_tables(store)) == _rows_without_keys(clean)


def _vectors(tables: dict[str, list[tuple[Any, ...]]]) -> list[tuple[bytes, bytes]]:
    return sorted((bytes(h), bytes(v)) for _, h, v, *_ in tables["vectors"])


def _rows_without_keys(tables: dict[str, list[tuple[Any, ...]]]) -> dict[str, Any]:
    """What a store holds, without the row ids and generations that a rebuild changes."""
    return {
        "vectors": _vectors(tables),
        "texts": sorted(bytes(t) for _, t, _ in tables["docs"]),
        "files": sorted(r[0] for r in tables["files"]),
        "children": len(tables["children"]),
        "nodes": len(tables["nodes"]),
    }


class TestDamageIsOneLine:
    def test_a_deleted_vector_row_is_one_line_everywhere_and_repair_mends_it(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        docs, store = guide_store
        with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            db.execute("DELETE FROM vectors WHERE id = 3")
            db.commit()
        repair = f"run: s2b verify --repair --store {store}\n"
        # A query answers from the FAISS index of the last commit, which holds the vector; it
        # reads only what its search leads to. The commands that read every chunk say it.
        assert _run(capsys, "query", "walruses", "--store", str(store))[0] == 0
        for argv in (["index", str(docs)], ["list"], ["verify"]):
            code, _, err = _run(capsys, *argv, "--store", str(store))
            assert code == 1, argv
            assert err.count("\n") == 1, err
            assert err.endswith(repair), err
        code, out, err = _run(capsys, "verify", "--store", str(store), "--repair")
        assert (code, err) == (0, "")
        assert out.splitlines()[1:] == [
            "damaged: 1 chunk(s) without their vector, 1 document(s) with missing pieces",
            "repaired: 1 document(s) rebuilt from their stored text, 0 removed, "
            "1 damaged row(s) and 0 orphan(s) deleted; 0 file(s) read again from disk",
        ]
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]
        assert _texts(capsys, store, "walruses dive", k=1)[0][0] == "other"

    def test_text_that_is_not_utf8_any_more_is_one_line_and_repaired(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        _, store = guide_store
        _overwrite(store, b"Walruses dive", b"Walruses\xff\xfeive")
        code, _, err = _run(capsys, "query", "walruses", "--store", str(store))
        assert code == 1
        assert err == (
            f"s2b: error: the index in {store} is damaged (node {_key(store, 'other', 0)!r} is "
            f"missing); run: s2b verify --repair --store {store}\n"
        )
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert code == 1
        assert out.splitlines()[1].startswith("damaged: 1 unreadable row(s)")
        assert _run(capsys, "verify", "--store", str(store), "--repair")[0] == 0
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]
        assert _texts(capsys, store, "walruses dive", k=1)[0][0] == "other"


def _key(store: Path, name: str, n: int) -> str:
    with closing(sqlite3.connect(store / "s2b.sqlite")) as db:
        rows = db.execute("SELECT key FROM children ORDER BY key").fetchall()
    return [k for (k,) in rows if f"{name}.2emd/sentence/" in k][n]


# 6. A full disk ------------------------------------------------------------------------------


class FullDisk:
    """A connection whose writes fail as on a full disk: SQLite rolls back, then says so."""

    def __init__(self, conn: sqlite3.Connection, fail_on: tuple[str, ...]) -> None:
        self._conn = conn
        self._fail_on = fail_on

    def _check(self, sql: str) -> None:
        if sql.lstrip().upper().startswith(self._fail_on):
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            msg = "database or disk is full"
            raise sqlite3.OperationalError(msg)

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _fill_the_disk(monkeypatch: pytest.MonkeyPatch, *fail_on: str) -> None:
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        return FullDisk(real(*args, **kwargs), fail_on)

    monkeypatch.setattr(sqlite3, "connect", connect)


class TestDiskFull:
    def test_delete_on_a_full_disk_is_one_line_and_changes_nothing(
        self, guide_store: tuple[Path, Path], capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        docs, store = guide_store
        before = _tables(store)
        _fill_the_disk(monkeypatch, "DELETE")
        code, out, err = _run(capsys, "delete", str(docs / "guide.md"), "--store", str(store))
        monkeypatch.undo()
        assert (code, out) == (1, "")
        assert err == (
            f"s2b: error: the disk holding {store} is full: nothing of the write that failed "
            "was kept; free some space and run the command again\n"
        )
        assert _tables(store) == before
        assert _run(capsys, "verify", "--store", str(store))[1].splitlines() == [HEALTHY, "ok"]

    def test_index_on_a_full_disk_is_one_line_and_changes_nothing(
        self, guide_store: tuple[Path, Path], capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        docs, store = guide_store
        (docs / "new.md").write_text("Narwhals have tusks.\n")
        before = _tables(store)
        _fill_the_disk(monkeypatch, "INSERT")
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        monkeypatch.undo()
        assert (code, out) == (1, "")
        assert err == (
            f"s2b: error: the disk holding {store} is full: nothing of the write that failed "
            "was kept; free some space and run the command again\n"
        )
        assert _tables(store) == before

    def test_a_new_store_whose_first_run_filled_the_disk_is_not_called_older(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first run committed vectors, then the disk filled: no ``s2b.json`` was written."""
        from langchain_s2b.cli import folder, indexer

        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "a.md").write_text("# T\n\nThe Normans gave their name to Normandy.\n")

        def full(*_: Any, **__: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(indexer, "_write", full)
        monkeypatch.setattr(folder, "write_text_atomic", full)
        assert _run(capsys, "index", str(docs), "--store", str(store))[0] == 1
        monkeypatch.undo()
        assert _run(capsys, "verify", "--store", str(store)) == (
            0,
            "0 file(s), 0 document(s), 0 chunk(s), 2 vector(s), 0 node(s)\n"
            f"no {store / 's2b.json'}: the last run that wrote the store could not write it (a "
            "full disk?), or an older s2b made the store; the next s2b index or verify --repair "
            "writes it\nok\n",
            "",
        )

    def test_a_store_on_a_full_disk_is_not_called_something_else(
        self, guide_store: tuple[Path, Path], capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _, store = guide_store
        real = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> Any:
            conn = real(*args, **kwargs)
            conn.close()
            msg = "disk I/O error"  # what opening a WAL database says when no byte is free
            raise sqlite3.OperationalError(msg)

        class Usage:
            free = 0

        monkeypatch.setattr(sqlite3, "connect", connect)
        monkeypatch.setattr("shutil.disk_usage", lambda path: Usage())
        for argv in (["query", "q"], ["list"], ["verify"]):
            code, _, err = _run(capsys, *argv, "--store", str(store))
            assert (code, err) == (
                1,
                f"s2b: error: the disk holding {store} is full: nothing of the write that "
                "failed was kept; free some space and run the command again\n",
            )


# 7. and 8. The store mirrors the files: moved and edited, symlinked --------------------


class TestMirror:
    def test_a_moved_and_edited_file_leaves_no_old_copy(self, tmp_path: Path, capsys) -> None:
        old, new, store = tmp_path / "mv" / "a", tmp_path / "mv" / "b", tmp_path / "s"
        old.mkdir(parents=True)
        (old / "f.rst").write_text("Lemurs leap between trees.\n")
        assert _run(capsys, "index", str(old), "--store", str(store))[0] == 0
        old.rename(new)
        with (new / "f.rst").open("a") as fh:
            fh.write("Lemurs eat fruit.\n")
        code, out, _ = _run(capsys, "index", str(new), "--store", str(store))
        assert code == 0
        assert _lines(out) == [
            f"indexed 1 file(s) into {store}: 1 added, 0 updated, 1 removed, 0 unchanged; "
            "1 document(s), 2 chunk(s), 2 vector(s) (1 embedded, 1 reused)"
        ]
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert out.splitlines()[:2] == [
            f"{new / 'f.rst'}  1 document(s), 2 chunk(s)",
            f"1 file(s), 1 document(s), 2 chunk(s), 2 vector(s) in {store}",
        ]
        text = "Lemurs leap between trees.\nLemurs eat fruit.\n"
        assert _texts(capsys, store, "lemurs leap") == [("f", text)]

    def test_files_through_a_symlinked_folder_are_indexed_once(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "f.rst").write_text("Tapirs browse at night.\n")
        (docs / "alias.rst").symlink_to(docs / "f.rst")
        (tmp_path / "link").symlink_to(docs)
        code, out, _ = _run(
            capsys, "index", str(docs), str(tmp_path / "link"), "--store", str(store)
        )
        assert code == 0
        assert _lines(out) == [
            f"indexed 1 file(s) into {store}: 1 added, 0 updated, 0 removed, 0 unchanged; "
            "1 document(s), 1 chunk(s), 1 vector(s) (1 embedded, 0 reused)",
            "read once: 1 link(s) to a file this run reads by its real path",  # alias.rst
        ]
        assert _texts(capsys, store, "tapirs") == [("f", "Tapirs browse at night.\n")]
        code, out, _ = _run(
            capsys, "index", str(tmp_path / "link" / "alias.rst"), "--store", str(store)
        )
        assert out == f"nothing to do: all 1 file(s) unchanged in {store}\n"
        code, out, _ = _run(capsys, "delete", str(tmp_path / "link"), "--store", str(store))
        assert out == f"deleted 1 file(s) (1 document(s)) from {store}\n"


# 9. One vocabulary for counts -------------------------------------------------------------


class TestCounts:
    def test_files_documents_chunks_and_vectors_agree_in_index_list_and_verify(
        self, tmp_path: Path, capsys
    ) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "copies.md").write_text("The walrus dives deep. It eats clams.\n\n" * 50)
        code, out, _ = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 0
        assert _lines(out) == [  # 50 paragraphs of 2 sentences, 2 distinct sentences
            f"indexed 1 file(s) into {store}: 1 added, 0 updated, 0 removed, 0 unchanged; "
            "1 document(s), 100 chunk(s), 2 vector(s) (2 embedded, 0 reused)"
        ]
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert code == 0
        assert out.splitlines()[:2] == [
            f"{docs / 'copies.md'}  1 document(s), 100 chunk(s)",
            f"1 file(s), 1 document(s), 100 chunk(s), 2 vector(s) in {store}",
        ]
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert code == 0
        # nodes: 100 sentences, 50 paragraphs, 1 section, 1 document
        assert out.splitlines() == [
            "1 file(s), 1 document(s), 100 chunk(s), 2 vector(s), 152 node(s)",
            "ok",
        ]

    def test_skipped_files_are_counted_by_reason(self, tmp_path: Path, capsys) -> None:
        docs, store = _rst_folder(tmp_path / "docs", 2), tmp_path / "s"
        (docs / "tool.py").write_text("print(1)\n")
        (docs / "logo.png").write_bytes(b"\x89PNG")
        (docs / ".draft.md").write_text("secret\n")
        (docs / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
        code, out, _ = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 3
        assert _lines(out)[1] == (
            "skipped 4 file(s): 1 hidden (names starting with '.'), 2 of an unsupported type, "
            "1 unreadable"
        )


# 10. The first hour -------------------------------------------------------------------------


class TestFirstHour:
    def test_progress_lines_and_elapsed_time_when_stderr_is_not_a_terminal(
        self, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        docs, store = _rst_folder(tmp_path / "docs", 2), tmp_path / "s"
        monkeypatch.setattr(progress, "EVERY", 0.0)  # a line at every step
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 0
        steps = [re.sub(r"\d+:\d\d elapsed", "T elapsed", line) for line in err.splitlines()]
        assert steps == [
            "s2b: reading: 1/2 file(s) (50%), T elapsed",
            "s2b: reading: 2/2 file(s) (100%), T elapsed",
            # each 40-character page split in 3 levels: the section level at 0, the paragraph
            # level at 1/3 (13), the sentences of its 2 paragraphs (at 0 and 16) at 2/3 (26)
            # and (80 + 16) / 120 (32), then done (40); then the second page
            *[f"s2b: splitting: {n}/80 character(s) ({100 * n // 80}%), T elapsed"
              for n in (13, 26, 32, 40, 53, 66, 72, 80)],
            "s2b: embedding: 4/4 vector(s) (100%), T elapsed",
            # the write is a phase of its own, in three steps: split again, the nodes stored
            # (a document, a section, 2 paragraphs and 2 sentences a page), the vectors added
            *[f"s2b: writing 1/3 (splitting): {n}/80 character(s) ({100 * n // 80}%), T elapsed"
              for n in (13, 26, 32, 40, 53, 66, 72, 80)],
            "s2b: writing 2/3 (text): 12/12 node(s) (100%), T elapsed",
            "s2b: writing 3/3 (vectors): 4/4 chunk(s) (100%), T elapsed",
            "s2b: writing the FAISS file: 4/4 vector(s) (100%), T elapsed",
        ]  # fmt: skip
        assert TIMING.fullmatch(out.splitlines()[-1])
        assert ": 4 chunk(s), " in out.splitlines()[-1]

    def test_the_readme_installs_from_a_clone_and_make_demo_installs_only_the_demo(self) -> None:
        readme = (ROOT / "README.md").read_text()
        assert 'pip install -e ".[local,cli]"' in readme
        assert 'pip install "langchain-s2b' not in readme  # not published
        makefile = (ROOT / "Makefile").read_text()
        demo = makefile.split("\ndemo:")[1].split("\n\n")[0]
        assert '$(BIN)/pip install -q -e ".[local,cli]"' in demo
        assert "--group" not in demo
        assert "stores" not in demo

    def test_the_retriever_docstring_installs_from_a_clone(self) -> None:
        from langchain_s2b import SmallToBigRetriever

        doc = SmallToBigRetriever.__doc__ or ""
        assert 'pip install -e ".[local]"  # in a clone of the repository (not on PyPI)' in doc
        assert "pip install -U" not in doc

    def test_the_readme_context_model_snippet_imports_every_name_it_uses(self) -> None:
        """Every name the snippet reads is imported or assigned in it (or a builtin)."""
        import ast
        import builtins

        readme = (ROOT / "README.md").read_text()
        (snippet,) = [
            block.split("```")[0]
            for block in readme.split("```python\n")[1:]
            if "context_model=ChatAnthropic" in block.split("```")[0]
        ]
        tree = ast.parse(snippet)
        bound = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 for a in n.names}  # fmt: skip
        bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}  # fmt: skip
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                and isinstance(n.ctx, ast.Load)}  # fmt: skip
        assert sorted(read - bound - set(dir(builtins))) == []
        assert bound >= {"ChatAnthropic", "LocalFileStore", "SmallToBigRetriever", "docs"}

    def test_list_json_has_the_model_and_the_size(
        self, guide_store: tuple[Path, Path], capsys
    ) -> None:
        docs, store = guide_store
        code, out, err = _run(capsys, "list", "--store", str(store), "--json")
        assert (code, err) == (0, "")
        got = json.loads(out)
        size = sum(p.stat().st_size for p in store.iterdir())
        assert got == {
            "store": str(store),
            "embedding": "fake",
            "bytes": size,
            "files": 2,
            "documents": 2,
            "chunks": 4,
            "vectors": 4,
            "files_indexed": [
                {"path": str(docs / "guide.md"), "documents": 1, "chunks": 2, "exists": True},
                {"path": str(docs / "other.md"), "documents": 1, "chunks": 2, "exists": True},
            ],
        }
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert out.splitlines()[-1] == f"embedding fake; {size / 1000:.1f} kB on disk"

    def test_eval_warns_about_questions_whose_documents_are_absent(
        self, guide_store: tuple[Path, Path], tmp_path: Path, capsys
    ) -> None:
        docs, store = guide_store
        rows = [
            {"id": "q1", "question": "What is small?", "answers": ["chunks"],
             "doc_id": str(docs / "guide.md"), "evidence": [{"start": 0, "end": 24}]},
            {"id": "q2", "question": "Who was Rollo?", "answers": ["a Viking"],
             "doc_id": "sq2-Normans", "evidence": [{"start": 0, "end": 5}]},
        ]  # fmt: skip
        questions = tmp_path / "q.jsonl"
        questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, _, err = _run(
            capsys,
            "eval",
            "--store",
            str(store),
            "--questions",
            str(questions),
            "--modes",
            "parent",
        )
        assert (code, err) == (
            0,
            f"s2b: warning: 1 of 2 question(s) are about 1 document(s) not in {store} "
            "(e.g. doc_id 'sq2-Normans'); they score 0\n",
        )

    def test_eval_progress_counts_questions_row_by_row(
        self,
        guide_store: tuple[Path, Path],
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """``--limit 2`` over 2 modes: each row counts to 2 questions (not one count to 6)."""
        docs, store = guide_store
        rows = [
            {"id": f"q{i}", "question": "What is small?", "answers": ["chunks"],
             "doc_id": str(docs / "guide.md"), "evidence": [{"start": 0, "end": 24}]}
            for i in range(3)
        ]  # fmt: skip
        questions = tmp_path / "q.jsonl"
        questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
        monkeypatch.setattr(progress, "EVERY", 0.0)  # a line at every step
        argv = ["eval", "--store", str(store), "--questions", str(questions), "--limit", "2"]
        code, _, err = _run(capsys, *argv, "--modes", "parent,window")
        steps = [re.sub(r"\d+:\d\d elapsed", "T elapsed", line) for line in err.splitlines()]
        assert (code, steps) == (
            0,
            [
                f"s2b: evaluating {n}/3: {row}: {i}/2 question(s) ({50 * i}%), T elapsed"
                for n, row in enumerate(("sentences (plain chunks)", "parent", "window"), 1)
                for i in (1, 2)
            ],
        )

    @pytest.mark.parametrize(
        ("extra", "message"),
        [
            (["   "], "the question is empty; ask something, e.g. s2b query 'who was Rollo?'"),
            (["q", "--mode", "window", "--parent-level", "doc"],
             "--parent-level is for --mode parent; --mode window does not use it"),
            (["q", "--mode", "parent", "--window-size", "2"],
             "--window-size is for --mode window or pack; --mode parent does not use it"),
        ],
    )  # fmt: skip
    def test_an_empty_query_or_an_unused_option_is_one_line(
        self, tmp_path: Path, capsys, extra: list[str], message: str
    ) -> None:
        code, out, err = _run(capsys, "query", *extra, "--store", str(tmp_path))
        assert (code, out, err) == (2, "", f"s2b query: error: {message} (see s2b query --help)\n")

    def test_a_failed_first_run_leaves_no_folder(
        self, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / "a.md").write_text("Okapis are shy.\n")

        def broken(spec: str) -> HashingEmbeddings:
            msg = f"--embedding {spec}: the model could not start"
            raise cli.UserError(msg)

        monkeypatch.setattr(models, "make_embedding", broken)
        code, _, err = _run(capsys, "index", str(tmp_path / "a.md"), "--store", str(tmp_path / "s"))
        assert (code, err) == (1, "s2b: error: --embedding fake: the model could not start\n")
        assert not (tmp_path / "s").exists()

    def test_a_store_inside_the_indexed_folder_is_named_as_the_reason(
        self, guide_store: tuple[Path, Path], tmp_path: Path, capsys
    ) -> None:
        _, store = guide_store
        code, _, err = _run(capsys, "index", str(store), "--store", str(store))
        assert (code, err) == (
            1,
            f"s2b: error: cannot index {store}: it is the store (--store {store}) or inside it\n",
        )
        only = tmp_path / "only"
        only.mkdir()
        inner = only / "s"
        assert _run(capsys, "index", str(tmp_path / "docs"), "--store", str(inner))[0] == 0
        code, _, err = _run(capsys, "index", str(only), "--store", str(inner))
        assert (code, err) == (
            1,
            f"s2b: error: nothing to index in {only}: the only files there are the store's own "
            f"(--store {inner} is inside it)\n",
        )


def test_vector_digests_cover_the_text_hash_and_the_bytes() -> None:
    vec = bytes(range(16))
    assert vector_digest(text_hash("a"), vec) != vector_digest(text_hash("b"), vec)
    assert vector_digest(text_hash("a"), vec) != vector_digest(text_hash("a"), vec[::-1])
    assert len(vector_digest(text_hash("a"), vec)) == 8
