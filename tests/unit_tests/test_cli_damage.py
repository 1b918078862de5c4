"""Every file of a store damaged anywhere: each command works or says so in one line.

A real store (three text files, ``--embedding fake``) is copied, one of its
files (``s2b.sqlite``, the FAISS file of the last commit, ``s2b.json``) is
damaged at an offset (sixteen random bytes written over it, a run of zeros, or
the file cut there), and every command runs on it in-process, as ``s2b`` runs:
``list``, ``query``, ``eval``, ``verify``, ``index`` (of the same folder) and
``delete`` (of a path that is not indexed). Each one either works (exit 0,
stderr empty or warnings of one line each) or prints one error line on stderr (after
the warnings it gave before it stopped) and exits 1, as the module docstring of
:mod:`langchain_s2b.cli.commands` says;
never a traceback. Then ``verify --repair`` works, and leaves a store that
``verify`` calls ok and that answers every file's marker with that file's text.

The damages the issue names (16 bytes at offset 100 and at 0 of the database,
a FAISS file cut to half or with its header garbled) are cases of their own;
Hypothesis draws the rest (``S2B_DAMAGE_EXAMPLES``, default 25; CI 60).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import open_store

CI = os.environ.get("CI", "").lower() == "true"
EXAMPLES = int(os.environ.get("S2B_DAMAGE_EXAMPLES", 60 if CI else 25))

FILES = {
    "a.txt": "Ocean tower markalpha. River stone light.\n\nCloud field maple.",
    "b.md": "# Notes\n\nField maple markbeta.\n\nTower ocean river. Stone light cloud.",
    "deep/c.txt": "Light cloud markgamma. Maple field ocean tower river stone.",
}
MARKERS = {"a.txt": "markalpha", "b.md": "markbeta", "deep/c.txt": "markgamma"}
STORE_FILES = ("s2b.sqlite", "faiss", "s2b.json")


def run(*argv: str) -> tuple[int, str, str]:
    """``s2b ARGV --embedding fake`` in-process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--embedding", "fake"])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder and the store indexed from it, to copy for each damage."""
    root = tmp_path_factory.mktemp("damage")
    for rel, text in FILES.items():
        (root / "folder" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "folder" / rel).write_text(text, encoding="utf-8")
    doc = str(root / "folder" / "a.txt")
    row = {"id": "1", "question": "markalpha?", "answers": ["a"], "doc_id": doc, "evidence": []}
    (root / "questions.jsonl").write_text(json.dumps(row) + "\n")
    code, out, err = run("index", str(root / "folder"), "--store", str(root / "store"))
    assert (code, err) == (0, ""), (out, err)
    return root


def store_file(store: Path, which: str) -> Path:
    if which == "faiss":
        (found,) = store.glob("s2b.*.*.faiss")
        return found
    return store / which


def damage(file: Path, kind: str, offset: int, junk: bytes) -> None:
    """Write ``junk`` at ``offset``, zero 4 KiB from it, or cut the file there."""
    raw = bytearray(file.read_bytes())
    offset = min(offset, max(0, len(raw) - 1))
    if kind == "cut":
        raw = raw[:offset]
    elif kind == "zero":
        raw[offset : offset + 4096] = bytes(len(raw[offset : offset + 4096]))
    else:
        raw[offset : offset + len(junk)] = junk
    file.write_bytes(bytes(raw))


def one_line_or_works(argv: list[str], code: int, err: str) -> None:
    """Exit 0 (warnings one line each), or 1 with exactly one ``s2b: error:`` line, the last."""
    assert "Traceback" not in err, (argv, err)
    lines = err.splitlines()
    if code == 0:
        assert all(line.startswith(("s2b: warning: ", "s2b: note: ")) for line in lines), err
        return
    assert code == 1, (argv, code, err)
    *warnings, last = lines  # what the command noticed before it stopped, then why it stopped
    assert all(line.startswith(("s2b: warning: ", "s2b: note: ")) for line in warnings), err
    assert last.startswith("s2b: error: "), (argv, err)


def every_command(template: Path, store: Path) -> None:
    folder = str(template / "folder")
    for argv in (
        ["list"],
        ["query", "markalpha", "-k", "1"],
        ["eval", "--questions", str(template / "questions.jsonl")],
        ["verify"],
        ["index", folder],
        ["delete", str(template / "not-indexed.txt")],
    ):
        code, _, err = run(*argv, "--store", str(store))
        if (
            argv[0] == "delete"
            and code == 1
            and err.endswith("is not in the index (see s2b list); nothing was deleted\n")
        ):
            continue  # the documented answer for a path the index does not hold
        one_line_or_works(argv, code, err)


def repaired_and_serving(template: Path, store: Path) -> None:
    """``verify --repair`` works; then ``verify`` is ok and each marker finds its file."""
    code, out, err = run("verify", "--repair", "--store", str(store))
    assert code == 0, (out, err)
    assert "Traceback" not in err
    code, out, err = run("verify", "--store", str(store))
    assert (code, out.splitlines()[-1], err) == (0, "ok", ""), (out, err)
    for rel, marker in MARKERS.items():
        code, out, err = run("query", marker, "--store", str(store), "--json", "-k", "1")
        assert (code, err) == (0, ""), (out, err)
        (result,) = json.loads(out)["results"]
        assert result["metadata"]["source_id"] == str(template / "folder" / rel)
        assert marker in result["text"]


def check_damage(template: Path, store: Path, which: str, kind: str, at: int, junk: bytes) -> None:
    """Damage a copy of the template's store (it indexes the template's folder, unchanged)."""
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(template / "store", store)
    try:
        damage(store_file(store, which), kind, at, junk)
        every_command(template, store)
        repaired_and_serving(template, store)
    finally:
        shutil.rmtree(store, ignore_errors=True)


@pytest.mark.parametrize(
    ("which", "kind", "at"),
    [
        ("s2b.sqlite", "junk", 100),  # the first page's b-tree header
        ("s2b.sqlite", "junk", 0),  # the file header: "not a database"
        ("faiss", "cut", -2),  # cut to half
        ("faiss", "junk", 0),  # its header garbled
        ("s2b.json", "junk", 20),
    ],
)
def test_the_damages_the_issue_names(
    template: Path, tmp_path: Path, which: str, kind: str, at: int
) -> None:
    if at == -2:
        at = store_file(template / "store", which).stat().st_size // 2
    check_damage(template, tmp_path / "store", which, kind, at, bytes(range(200, 216)))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    which=st.sampled_from(STORE_FILES),
    kind=st.sampled_from(["junk", "junk", "zero", "cut"]),
    where=st.one_of(st.sampled_from([0, 16, 24, 40, 100, 8192, 8292]), st.floats(0, 1)),
    junk=st.binary(min_size=16, max_size=16),
)
def test_damage_anywhere(
    template: Path, tmp_path: Path, which: str, kind: str, where: float, junk: bytes
) -> None:
    size = store_file(template / "store", which).stat().st_size
    at = int(where * (size - 1)) if isinstance(where, float) else int(where)
    check_damage(template, tmp_path / "store", which, kind, at, junk)


# The findings of issue 28, each with its exact answer ------------------------------------


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    """A copy of the template's store (its files are the template folder's)."""
    shutil.copytree(template / "store", tmp_path / "store")
    return tmp_path / "store"


def count(template: Path, table: str) -> int:
    """Rows of a table of the template's store (the same files indexed once)."""
    with contextlib.closing(sqlite3.connect(template / "store" / "s2b.sqlite")) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _marker_texts(template: Path, store: Path) -> None:
    for rel, marker in MARKERS.items():
        code, out, err = run("query", marker, "--store", str(store), "--json", "-k", "1")
        assert (code, err) == (0, ""), err
        (result,) = json.loads(out)["results"]
        assert result["metadata"]["source_id"] == str(template / "folder" / rel)


class TestTheFaissFile:
    def test_cut_to_half_verify_sees_it_and_repair_writes_it_again(self, store: Path) -> None:
        file = store_file(store, "faiss")
        whole = file.read_bytes()
        file.write_bytes(whole[: len(whole) // 2])
        code, out, err = run("verify", "--store", str(store))
        assert code == 1
        assert out.splitlines()[1:] == [
            f"damaged: 1 damaged FAISS index file ({file.name}: it is {len(whole) // 2} bytes; "
            f"{len(whole)} were written)"
        ]
        assert err == f"s2b: error: {store} is damaged; run: s2b verify --repair --store {store}\n"
        code, out, err = run("verify", "--repair", "--store", str(store))
        assert (code, err) == (0, "")
        assert out.splitlines()[-1].endswith("; the FAISS index file written again")
        (again,) = store.glob("s2b.*.*.faiss")
        assert again.read_bytes() == whole  # the same vectors, in the same order
        code, out, err = run("verify", "--store", str(store))
        assert (code, out.splitlines()[-1], err) == (0, "ok", "")

    def test_a_garbled_header_is_said_once_by_the_query_that_writes_it_again(
        self, template: Path, store: Path
    ) -> None:
        file = store_file(store, "faiss")
        whole = file.read_bytes()
        file.write_bytes(b"IxQ9" + whole[4:])
        code, out, err = run("query", "markbeta", "--store", str(store), "--json", "-k", "1")
        assert code == 0
        assert err == (
            f"s2b: warning: the FAISS index file of {store} is damaged (its header is not a "
            "FAISS IndexIDMap2 over a flat index (b'IxQ9', b'IxFI')); this run built the index "
            "from the database and wrote the file again; check the disk, and the rest of the "
            f"store with s2b verify --store {store}\n"
        )
        assert [r["metadata"]["source_id"] for r in json.loads(out)["results"]] == [
            str(template / "folder" / "b.md")
        ]
        assert file.read_bytes() == whole
        _marker_texts(template, store)  # the next queries read the file, and say nothing

    def test_a_garbled_vector_only_its_digest_tells(self, store: Path) -> None:
        file = store_file(store, "faiss")
        raw = bytearray(file.read_bytes())
        raw[200] ^= 0x40  # inside the first vector: size and header unchanged
        file.write_bytes(bytes(raw))
        code, out, _ = run("verify", "--store", str(store))
        assert code == 1
        assert out.splitlines()[1] == (
            f"damaged: 1 damaged FAISS index file ({file.name}: its SHA-256 is not the one "
            "recorded when it was written)"
        )
        assert run("verify", "--repair", "--store", str(store))[0] == 0
        assert run("verify", "--store", str(store))[:2] == (0, out.splitlines()[0] + "\nok\n")

    def test_a_store_without_records_opens_and_its_next_writer_records(
        self, template: Path, store: Path
    ) -> None:
        """A store made before the record and ``s2b.json``: read as it is, recorded once."""
        with contextlib.closing(sqlite3.connect(store / "s2b.sqlite")) as db, db:
            db.execute("DELETE FROM meta WHERE name = 'faiss_file'")
        (store / "s2b.json").unlink()
        code, out, err = run("verify", "--store", str(store))
        assert (code, err) == (0, "")
        assert out.splitlines()[1:] == [
            "the FAISS index file has no recorded digest: the run that wrote it could not "
            "record it (another run was writing, or the disk was full), or an older s2b wrote "
            "it; the next s2b index or verify --repair records it",
            f"no {store / 's2b.json'}: the last run that wrote the store could not write it (a "
            "full disk?), or an older s2b made the store; the next s2b index or verify --repair "
            "writes it",
            "ok",
        ]
        _marker_texts(template, store)
        code, out, err = run("index", str(template / "folder"), "--store", str(store))
        assert (code, err) == (0, "")
        code, out, err = run("verify", "--store", str(store))
        assert (code, out.splitlines()[1:], err) == (0, ["ok"], "")
        file = store_file(store, "faiss")
        with contextlib.closing(sqlite3.connect(store / "s2b.sqlite")) as db:
            (value,) = db.execute("SELECT value FROM meta WHERE name = 'faiss_file'").fetchone()
        assert json.loads(value) == {
            "name": file.name,
            "size": file.stat().st_size,
            "count": count(template, "children"),
            "dim": 256,
            "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        }

    def test_a_reader_of_an_older_snapshot_leaves_a_later_commits_file(
        self, template: Path, tmp_path: Path
    ) -> None:
        folder = tmp_path / "folder"
        shutil.copytree(template / "folder", folder)
        store = tmp_path / "store"
        assert run("index", str(folder), "--store", str(store))[0] == 0
        (first,) = store.glob("s2b.*.*.faiss")
        first.unlink()  # the next command builds it
        reader = open_store(store, "fake")
        try:
            with reader.db.read():
                assert reader.db.stamp() == stamp_of(first)  # the reader's snapshot begins
                (folder / "a.txt").write_text("Ocean tower markalpha, edited.")
                assert run("index", str(folder), "--store", str(store))[0] == 0
                (later,) = store.glob("s2b.*.*.faiss")
                assert reader.index.open(store, mapped=True)  # built: its file was gone
        finally:
            reader.close()
        assert sorted(p.name for p in store.glob("s2b.*.*.faiss")) == sorted(
            [first.name, later.name]
        )
        code, out, err = run("verify", "--store", str(store))  # reads the later commit
        assert (code, out.splitlines()[-1], err) == (0, "ok", "")


def stamp_of(file: Path) -> tuple[str, int]:
    """The ``(database id, commit)`` a FAISS file's name gives."""
    _, ident, commit, _ = file.name.split(".")
    return ident, int(commit)


class TestTheDatabaseFile:
    @pytest.mark.parametrize("at", [100, 0])
    def test_damage_sqlite_can_not_read_past_is_indexed_again(
        self, template: Path, store: Path, at: int
    ) -> None:
        database = store / "s2b.sqlite"
        raw = bytearray(database.read_bytes())
        raw[at : at + 16] = bytes(range(200, 216))
        database.write_bytes(bytes(raw))
        what = "database disk image is malformed" if at else "file is not a database"
        line = (
            f"s2b: error: the database file {database} is damaged ({what}); run: s2b verify "
            f"--repair --store {store} (it indexes the files again into a new database file)\n"
        )
        for argv in (["list"], ["query", "markalpha"], ["verify"]):
            assert run(*argv, "--store", str(store)) == (1, "", line), argv
        code, out, err = run("verify", "--repair", "--store", str(store))
        (aside,) = store.glob("s2b.sqlite.damaged-*")
        assert (code, err) == (0, "")
        assert out.splitlines() == [
            "rebuilt: 3 file(s) indexed again into a new database file, as s2b.json lists them "
            f"(0 vector(s) kept from the damaged one, {count(template, 'vectors')} embedded)",
            f"the damaged database file is kept as {aside}",
        ]
        assert aside.read_bytes() == bytes(raw)
        code, out, err = run("verify", "--store", str(store))
        assert (code, out.splitlines()[-1], err) == (0, "ok", "")
        _marker_texts(template, store)

    def test_two_repairs_in_one_second_keep_both_damaged_files(
        self, store: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The damaged copy's name has one-second resolution: the second one is ``-2``."""
        import time

        monkeypatch.setattr(time, "strftime", lambda _format: "20260102T030405")
        database = store / "s2b.sqlite"
        damaged = []
        for byte in (200, 100):
            raw = bytearray(database.read_bytes())
            raw[0:16] = bytes([byte] * 16)
            database.write_bytes(bytes(raw))
            damaged.append(bytes(raw))
            code, _, err = run("verify", "--repair", "--store", str(store))
            assert (code, err) == (0, "")
        first = store / "s2b.sqlite.damaged-20260102T030405"
        second = store / "s2b.sqlite.damaged-20260102T030405-2"
        assert sorted(store.glob("s2b.sqlite.damaged-*")) == [first, second]
        assert [first.read_bytes(), second.read_bytes()] == damaged

    def test_without_its_listing_the_repair_says_why_it_can_not(self, store: Path) -> None:
        database = store / "s2b.sqlite"
        raw = bytearray(database.read_bytes())
        raw[100:116] = bytes(16)
        database.write_bytes(bytes(raw))
        (store / "s2b.json").unlink()
        code, out, err = run("verify", "--repair", "--store", str(store))
        assert (code, out) == (1, "")
        assert err == (
            f"s2b: error: cannot repair {database}: it can not be read, and there is no "
            "s2b.json beside it to say which model the store uses and which files it indexed "
            "(a store made by an older s2b); index your files into a new --store\n"
        )

    def test_a_damaged_listing_is_damage_that_repair_writes_again(self, store: Path) -> None:
        listing = store / "s2b.json"
        good = listing.read_bytes()
        listing.write_bytes(good.replace(b"a.txt", b"A.txt"))
        code, out, _ = run("verify", "--store", str(store))
        assert code == 1
        assert out.splitlines()[1] == (
            f"damaged: 1 damaged s2b.json ({listing} is damaged (ValueError: its content is "
            "not the one its SHA-256 was made of))"
        )
        assert run("verify", "--repair", "--store", str(store))[0] == 0
        assert listing.read_bytes() == good

    def test_a_missing_database_file_is_indexed_again_from_its_listing(
        self, template: Path, store: Path
    ) -> None:
        (store / "s2b.sqlite").unlink()
        line = (
            f"s2b: error: the database file {store / 's2b.sqlite'} is missing; run: s2b verify "
            f"--repair --store {store} (it indexes the files again into a new database file)\n"
        )
        for argv in (["list"], ["query", "markalpha"], ["index", str(template / "folder")]):
            assert run(*argv, "--store", str(store)) == (1, "", line), argv
        code, out, err = run("verify", "--repair", "--store", str(store))
        assert (code, err) == (0, "")
        assert out == (
            "rebuilt: 3 file(s) indexed again into a new database file, as s2b.json lists them "
            f"(0 vector(s) kept from the damaged one, {count(template, 'vectors')} embedded)\n"
        )
        _marker_texts(template, store)
