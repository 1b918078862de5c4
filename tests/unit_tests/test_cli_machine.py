"""A stateful model test of the command line's store: index, damage, verify, with faults.

The model is a dict ``relative path -> text`` of the ``.txt`` files that the
last successful ``s2b index`` of a real folder wrote into a real store. Files
are written, rewritten and deleted in the folder; the model changes only when
an index run succeeds (or commits part of its work: see below). Every command
runs in-process through :func:`~langchain_s2b.cli.commands.main`, exactly as
``s2b`` runs it (exit status and one-line errors included).

Faults injected into ``s2b index`` (each fires once, after the real call wrote
its rows, inside the write transaction):

- ``OSError`` in the FTS5 add (``SQLiteLexical.add``), the leaves' rows
  (``SQLiteRows.add``) or the docstore write (``SQLiteDocStore.mset``): exit 1,
  nothing of the failed transaction is visible. The files that left the folder
  are removed in a transaction of their own before the new ones are written
  (``indexer.run``: "each group of files in one transaction"), so that removal
  stands;
- ``KeyboardInterrupt`` at the same points: exit 130, the same outcome;
- the same two in the child index's FAISS part, just after FAISS returned:
  ``add_with_ids`` (the new leaves) and ``remove_ids`` (a removed file's
  leaves, in the transaction that removes them first, or an updated file's
  previous ones, in its group's): the transaction it fired in left nothing
  (when that is the removal of the files that left the folder, the run stops
  there and they stay indexed). Removing an updated file's previous leaves
  comes after the update's commit record: an ``OSError`` there is a warning
  (exit 0, the update stands) and leaves the previous leaves, whole, for
  ``verify --repair`` to remove;
- the FAISS file write fails (``OSError`` from ``faiss.write_index``): the
  commit stands (exit 0); the next reader builds the file of that commit once
  from the database, and the one after it reads the file.

Damage: the FAISS file of the current commit is deleted (the next command
builds it again: ``verify`` is then ``ok``), or replaced by the file of an
older commit, or truncated to half, or its header or a vector garbled.
``verify`` reports exactly what :func:`expected_problem` (the rule written out
again: the file's size, header and SHA-256 against the record made when it was
written, else its count against the database's chunks) or a comparison of the
file's ids and vectors with the database's finds; ``verify --repair`` says it
repaired it and writes the file again, and ``verify`` is then ``ok``. A query
on a truncated file or a garbled header answers, says so in one line, and
writes the file again. The database file is damaged where SQLite can not read
past it (sixteen bytes at offset 100, in the first page's b-tree header, or in
the file header): every command (``list``, ``query``, ``verify``, ``index``,
``delete``, ``eval``) says so in one line naming ``verify --repair`` and exits
1; ``verify --repair`` indexes the files that ``s2b.json`` lists, as they are on
disk now, into a new database file (exit 3 when one of them is gone, each named),
and keeps the damaged one aside, byte for byte.

After every step, through a fresh open of the store as a new command opens it
(the FAISS file memory-mapped, in one read snapshot):

- the docstore holds exactly the model's files: one manifest per file, each
  node's text the span ``[start, end)`` of its file's text, no other key;
- the FAISS index holds exactly the model's leaves (ids = the leaves' rows) and
  each leaf's vector is the normalised embedding of its text (computed here);
- the FTS5 table holds exactly those leaves, and for every vocabulary word and
  marker, the leaves FTS5 matches (a ``MATCH`` and the backend's
  ``search_text``) are exactly those whose ``analyze(text)`` holds the word;
- a hybrid query (as ``s2b query`` asks it) for a file's marker returns that
  file's text first (``-k 1``) and only that file's text under a budget; no
  query returns text of a file outside the model, and every text is the span
  its metadata names;
- the commit counter never decreases; a successful run that changed the model
  raises it; the store holds the FAISS file of its commit and no other.

``S2B_CLI_SEQUENCES`` / ``S2B_CLI_STEPS`` scale it (default 30 x 10, ~25 s on a busy
2-core machine; ``CI=true``: 60 x 12). Two bugs it found (fixed) are shown at the end of
this file by one small run each.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from langchain_s2b.cli import actions, indexer
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import DB_FILE, Store, open_store
from langchain_s2b.cli.querying import query_options
from langchain_s2b.core import lifecycle
from langchain_s2b.core.ingest import leaf_keys, node_keys, nodes_key
from langchain_s2b.core.keys import is_manifest_key, node_key
from langchain_s2b.core.tree import DOC_LEVEL
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.store import sqlite
from langchain_s2b.store.lexical.analyzer import analyze
from langchain_s2b.store.sqlite import sqlite_lexical
from langchain_s2b.store.sqlite.database import Database
from langchain_s2b.store.sqlite.index_file import index_file
from langchain_s2b.store.vectors import normalise

CI = os.environ.get("CI", "").lower() == "true"
SEQUENCES = int(os.environ.get("S2B_CLI_SEQUENCES", 60 if CI else 30))
STEPS = int(os.environ.get("S2B_CLI_STEPS", 12 if CI else 10))

FILES = ["a.txt", "sub/b.txt", "sub/deep/c d.txt", "e.txt"]
"""Paths in the folder; ``MARKERS[i]`` appears only in ``FILES[i]``."""
MARKERS = ["markalpha", "markbeta", "markgamma", "markdelta"]
VOCAB = ["river", "stone", "light", "cloud", "field", "maple", "ocean", "tower"]
DIM = 256
"""``HashingEmbeddings``' size (``--embedding fake``)."""
FAKE = ["--embedding", "fake"]
BUDGET = 40


def _buckets_are_distinct() -> None:
    """Every word lands in its own embedding bucket, so a marker query finds only its file."""
    words = [*MARKERS, *VOCAB]
    buckets = {zlib.crc32(w.encode()) % DIM for w in words}
    assert len(buckets) == len(words), "pick other words: two share a bucket"
    assert 0 not in buckets  # bucket 0 holds HashingEmbeddings' constant


_buckets_are_distinct()


words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6)


@st.composite
def texts(draw: st.DrawFn, marker: str) -> str:
    """A few sentences and paragraphs; the file's marker appears at least once."""
    sentences = draw(st.lists(words, min_size=1, max_size=6))
    where = draw(st.integers(0, len(sentences) - 1))
    sentences[where] = [*sentences[where], marker]
    out = []
    for i, sentence in enumerate(sentences):
        sep = draw(st.sampled_from([" ", " ", "\n", "\n\n"])) if i else ""
        out.append(sep + " ".join(sentence).capitalize() + ".")
    return "".join(out) + draw(st.sampled_from(["", "\n"]))


class DiskFullError(OSError):
    """A write inside the index transaction failed (``OSError``, as a full disk raises)."""

    def __init__(self) -> None:
        super().__init__(errno.EIO, "injected write failure")


FAULT_TARGETS: dict[str, tuple[Any, str]] = {
    "lexical": (sqlite_lexical.SQLiteLexical, "add"),
    "rows": (sqlite.SQLiteRows, "add"),
    "docstore": (sqlite.SQLiteDocStore, "mset"),
    "faiss-add": (faiss.IndexIDMap2, "add_with_ids"),
    "faiss-remove": (faiss.IndexIDMap2, "remove_ids"),
}
FAULTS = st.sampled_from(
    [  # faults first: Hypothesis draws the first choices more often
        "error:lexical",
        "error:rows",
        "error:docstore",
        "interrupt:lexical",
        "interrupt:rows",
        "interrupt:docstore",
        "error:faiss-add",
        "interrupt:faiss-add",
        "error:faiss-remove",
        "interrupt:faiss-remove",
        "faiss-file",
        None,
        None,
        None,
    ]
)


def run(*argv: str) -> tuple[int, str, str]:
    """``s2b ARGV --embedding fake`` in-process: exit status, stdout, stderr.

    ``s2b index`` runs with ``--no-headers``: the invariants compute each leaf's
    vector from its text alone (headers have a state machine of their own, in
    ``test_lifecycle_machine.py``, and ``test_cli_headers.py``).
    """
    out, err = io.StringIO(), io.StringIO()
    extra = ["--no-headers"] if argv and argv[0] == "index" else []
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, *extra, *FAKE])
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def fault_at(kind: str, target: str, at: int) -> Iterator[list[bool]]:
    """Raise after call number ``at`` of the target has written its rows; yields [fired].

    ``fired`` gets a second item, where it fired: ``"first"`` before any
    transaction could commit (while FAISS was built from the database as the
    run opened the store, or while the files that left the folder were being
    removed, in their own transaction: the run stops there, changing nothing),
    ``"cleanup"`` while an updated source's previous leaves were removed after
    its commit record, else ``""``.
    """
    owner, name = FAULT_TARGETS[target]
    real = getattr(owner, name)
    calls = [0]
    fired: list[Any] = [False]
    phase = [""]

    def faulty(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == at + 1 and not fired[0]:
            fired[0] = True
            fired.append(phase[0])
            if kind == "interrupt":
                raise KeyboardInterrupt
            raise DiskFullError
        return result

    def first(call: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            phase[0] = "first"
            try:
                return call(*args, **kwargs)
            finally:
                phase[0] = ""

        return wrapped

    def cleanup(op: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            phase[0] = "cleanup"
            try:
                return (yield from op(*args, **kwargs))
            finally:
                phase[0] = ""

        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(owner, name, faulty)
        mp.setattr(indexer, "_remove", first(indexer._remove))
        mp.setattr(sqlite.SQLiteFaissIndex, "build", first(sqlite.SQLiteFaissIndex.build))
        mp.setattr(lifecycle, "_cleanup", cleanup(lifecycle._cleanup))
        yield fired


@contextlib.contextmanager
def faiss_write_fails() -> Iterator[list[int]]:
    """``faiss.write_index`` raises ``OSError`` (no room for the file); yields [calls]."""
    calls = [0]

    def broken(index: Any, path: str) -> None:
        calls[0] += 1
        raise OSError(errno.ENOSPC, "No space left on device", path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(faiss, "write_index", broken)
        yield calls


def faiss_files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("s2b.*.*.faiss")}


def stamp_of(directory: Path) -> tuple[str, int]:
    db = Database(directory / DB_FILE)
    try:
        stamp = db.stamp()
    finally:
        db.close()
    assert stamp is not None
    return stamp


def database_rows(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """The leaves' rows and their normalised stored vectors, read with plain sqlite3."""
    with contextlib.closing(sqlite3.connect(directory / DB_FILE)) as conn:
        found = conn.execute(
            "SELECT c.row, v.vec FROM children c JOIN vectors v ON v.id = c.vec ORDER BY c.row"
        ).fetchall()
    rows = np.asarray([r for r, _ in found], dtype=np.int64)
    if not found:
        return rows, np.zeros((0, DIM), dtype=np.float32)
    return rows, normalise(np.stack([np.frombuffer(v, np.float32) for _, v in found]))


def file_matches(file: Path, rows: np.ndarray, vectors: np.ndarray) -> bool:
    """Whether a FAISS file holds exactly these rows with these vectors."""
    index: Any = faiss.read_index(str(file))
    held = np.sort(faiss.vector_to_array(index.id_map).astype(np.int64))
    if not np.array_equal(held, np.sort(rows)):
        return False
    if not len(rows):
        return True
    return bool(np.allclose(index.reconstruct_batch(rows), vectors, atol=1e-6))


LAYOUT_HEAD = 82
"""Bytes before a FAISS file's vectors: the ``IxM2`` header (37), the ``IxFI`` header (37), and
the byte size of the vectors (8)."""


def recorded(directory: Path) -> dict[str, Any] | None:
    """The FAISS file record in the database's ``meta`` table, read with plain sqlite3."""
    with contextlib.closing(sqlite3.connect(directory / DB_FILE)) as conn:
        row = conn.execute("SELECT value FROM meta WHERE name = 'faiss_file'").fetchone()
    return None if row is None else dict(json.loads(row[0]))


def header_of(raw: bytes) -> tuple[bytes, int, int, bytes, int] | None:
    """``(magic, dim, count, inner magic, vector bytes)`` of a FAISS file's bytes, by hand."""
    if len(raw) < LAYOUT_HEAD:
        return None
    magic, dim, count = raw[0:4], int.from_bytes(raw[4:8], "little"), raw[8:16]
    inner, data = raw[37:41], int.from_bytes(raw[74:82], "little")
    return magic, dim, int.from_bytes(count, "little", signed=True), inner, data


def expected_problem(directory: Path, current: Path, raw: bytes) -> str | None:
    """What ``s2b`` must say of ``raw`` as the current FAISS file (``None``: nothing).

    The rule, written out again: against the record of the file (its size,
    then its header, then its digest), or without one against the database's
    chunks.
    """
    record = recorded(directory)
    if record is not None and record["name"] != current.name:
        record = None
    if record is not None and len(raw) != record["size"]:
        return f"it is {len(raw)} bytes; {record['size']} were written"
    head = header_of(raw)
    if head is None:
        return f"it is {len(raw)} bytes, shorter than a FAISS header"
    magic, dim, count, inner, _ = head
    if magic != b"IxM2" or inner != b"IxFI":
        return f"its header is not a FAISS IndexIDMap2 over a flat index ({magic!r}, {inner!r})"
    full = LAYOUT_HEAD + count * dim * 4 + 8 + count * 8
    if len(raw) != full:
        return f"it is {len(raw)} bytes; its header declares {count} vectors, {full} bytes"
    if record is None:
        leaves = len(database_rows(directory)[0])
        return (
            None
            if count == leaves
            else f"it holds {count} vectors; the database holds {leaves} chunks"
        )
    if hashlib.sha256(raw).hexdigest() != record["sha256"]:
        return "its SHA-256 is not the one recorded when it was written"
    return None


def expected_damage(directory: Path, current: Path, raw: bytes) -> str | None:
    """What ``verify`` must list for ``raw`` as the current FAISS file (``None``: ok)."""
    problem = expected_problem(directory, current, raw)
    if problem is not None:
        return f"1 damaged FAISS index file ({current.name}: {problem})"
    with tempfile.TemporaryDirectory() as scratch:
        file = Path(scratch) / "f.faiss"
        file.write_bytes(raw)
        if file_matches(file, *database_rows(directory)):
            return None
    return "1 FAISS index file that does not match the database"


def distinct_leaf_texts(directory: Path) -> int:
    """How many distinct chunk texts the store holds (each one vector)."""
    with contextlib.closing(sqlite3.connect(directory / DB_FILE)) as conn:
        return int(conn.execute("SELECT count(DISTINCT vec) FROM children").fetchone()[0])


class CliMachine(RuleBasedStateMachine):
    """``s2b index`` / ``verify`` on a real folder and store against a dict of indexed files."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="s2b-cli-machine-")).resolve()
        self.folder = self.root / "folder"
        self.folder.mkdir()
        self.store = self.root / "store"
        self.kept = self.root / "kept"
        self.kept.mkdir()
        self.model: dict[str, str] = {}
        self.disk: dict[str, str] = {}
        """What the folder holds now."""
        self.last_stamp: tuple[str, int] | None = None

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _started(self) -> bool:
        return (self.store / DB_FILE).exists()

    def _source(self, rel: str) -> str:
        return str(self.folder / rel)

    @initialize(chosen=st.lists(st.integers(0, len(FILES) - 1), min_size=1, unique=True))
    def start(self, chosen: list[int]) -> None:
        """A first successful run, so that every sequence starts with a store and its file."""
        for i in chosen:
            self._write(i, f"{' '.join(VOCAB[i : i + 3]).capitalize()} {MARKERS[i]}.")
        self.index(fault=None, at=0, edit=None, data=None)

    # Rules: the folder ----------------------------------------------------------------

    def _write(self, i: int, text: str) -> None:
        path = self.folder / FILES[i]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.disk[FILES[i]] = text

    @rule(i=st.integers(0, len(FILES) - 1), data=st.data())
    def write(self, i: int, data: st.DataObject) -> None:
        self._write(i, data.draw(texts(MARKERS[i])))

    @precondition(lambda self: bool(self.disk))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        rel = data.draw(st.sampled_from(sorted(self.disk)))
        (self.folder / rel).unlink()
        del self.disk[rel]

    # Rules: the store -------------------------------------------------------------------

    @rule(
        fault=FAULTS,
        at=st.sampled_from([0, 0, 1]),
        edit=st.none() | st.integers(0, len(FILES) - 1),
        data=st.data(),
    )
    def index(
        self, fault: str | None, at: int, edit: int | None, data: st.DataObject | None
    ) -> None:
        """``s2b index FOLDER`` (``edit``: a file is written first, so that there is work)."""
        if edit is not None and data is not None:
            self._write(edit, data.draw(texts(MARKERS[edit])))
        before = dict(self.model)
        gone = {rel for rel in before if rel not in self.disk}
        changed = {rel for rel, text in self.disk.items() if before.get(rel) != text}
        with contextlib.ExitStack() as stack:
            fired, faiss_calls = [False], [0]
            if fault is not None and fault.startswith(("error:", "interrupt:")):
                kind, target = fault.split(":")
                fired = stack.enter_context(fault_at(kind, target, at))
            elif fault == "faiss-file":
                faiss_calls = stack.enter_context(faiss_write_fails())
            code, out, err = run("index", str(self.folder), "--store", str(self.store), "--no-wait")
        event(f"index fault: {fault if fired[0] or faiss_calls[0] else None}")
        if fired[0] and fired[1] == "cleanup" and fault == "error:faiss-remove":
            err = self._leftovers_repaired(err)
        elif fired[0]:
            self._failed(fault or "", code, err, set() if fired[1] == "first" else gone)
            return
        if not self.disk and not gone:
            assert code == 1, (out, err)
            assert err.startswith(f"s2b: error: nothing to index in {self.folder}"), err
            return
        assert (code, err) == (0, ""), (out, err)
        self._check_report(out, before, gone, changed)
        self.model = dict(self.disk)
        stamp = stamp_of(self.store)
        if self.last_stamp is not None and self.model != before:
            assert stamp[1] > self.last_stamp[1]
        current = index_file(self.store, stamp)
        if fault == "faiss-file" and faiss_calls[0]:
            assert not current.exists()  # the commit stands without its file
            self._next_reader_builds_once(current)
        if current.exists():
            shutil.copy(current, self.kept / current.name)

    def _leftovers_repaired(self, err: str) -> str:
        """An error removing the previous leaves after the commit: a warning; repair removes them.

        Returns ``err`` less the warning (the run itself succeeded).
        """
        warning = (
            "s2b: warning: The new versions are written, but removing the previous ones failed "
            "(DiskFullError(5, 'injected write failure')); run verify(repair=True) to remove what "
            "is left.\n"
        )
        assert err.endswith(warning), err
        code, out, verify_err = run("verify", "--store", str(self.store))
        assert code == 1, (out, verify_err)
        assert "orphan(s)" in out.splitlines()[1], out
        code, out, verify_err = run("verify", "--repair", "--store", str(self.store))
        assert (code, verify_err) == (0, ""), (out, verify_err)
        assert out.splitlines()[-1].startswith("repaired: 0 document(s) rebuilt"), out
        return err.removesuffix(warning)

    def _failed(self, fault: str, code: int, err: str, gone: set[str]) -> None:
        """A fault inside the write transaction: that transaction left nothing behind."""
        if fault.startswith("interrupt:"):
            assert code == 130
            assert err.startswith("s2b: interrupted;"), err
        else:
            assert code == 1
            assert err == "s2b: error: [Errno 5] injected write failure\n"
        for rel in gone:  # removed in the transaction before the one that failed
            del self.model[rel]

    def _check_report(
        self, out: str, before: dict[str, str], gone: set[str], changed: set[str]
    ) -> None:
        added = len([r for r in changed if r not in before])
        updated = len(changed) - added
        unchanged = len(self.disk) - len(changed)
        if not changed and not gone:
            want = f"nothing to do: all {unchanged} file(s) unchanged in {self.store}"
            assert out.splitlines() == [want]
            return
        first = out.splitlines()[0]
        assert first.startswith(
            f"indexed {len(self.disk)} file(s) into {self.store}: {added} added, {updated} "
            f"updated, {len(gone)} removed, {unchanged} unchanged; "
        ), first

    def _next_reader_builds_once(self, current: Path) -> None:
        """The first command after a failed file write builds it; the next reads it."""
        leaves = bool(database_rows(self.store)[0].size)
        for expected_build in (True, not leaves):  # without leaves there is no file to keep
            store = open_store(self.store, "fake")
            try:
                assert store.restore(read_only=True) is expected_build
                assert store.index.built == int(expected_build)
            finally:
                store.close()
        assert current.exists() == leaves

    @precondition(lambda self: self._started())
    @rule(repair=st.booleans())
    def verify(self, repair: bool) -> None:
        code, out, err = run(
            "verify", "--store", str(self.store), *(["--repair"] if repair else [])
        )
        assert (code, err) == (0, ""), (out, err)
        lines = out.splitlines()
        assert lines[-1] == "ok", out
        assert lines[0].startswith(f"{len(self.model)} file(s), {len(self.model)} document(s), ")

    # Rules: damage -----------------------------------------------------------------------

    def _current(self) -> Path:
        return index_file(self.store, stamp_of(self.store))

    @precondition(lambda self: self._started() and self._current().exists())
    @rule(then=st.sampled_from(["query", "verify"]))
    def lose_the_faiss_file(self, then: str) -> None:
        """The next command builds the file of the commit again (verify then finds no damage)."""
        event(f"lost FAISS file, then {then}")
        current = self._current()
        current.unlink()
        if then == "verify":
            self.verify(repair=False)
        else:
            code, out, err = run("query", VOCAB[0], "--store", str(self.store), "--json")
            assert (code, err) == (0, ""), (out, err)
        assert current.exists() == bool(database_rows(self.store)[0].size)  # none: no FAISS

    def _older_files(self) -> list[Path]:
        if not self._started():
            return []
        current = self._current()
        same_db = f"s2b.{current.name.split('.')[1]}."
        return sorted(
            p
            for p in self.kept.glob("s2b.*.faiss")
            if p.name != current.name and p.name.startswith(same_db)
        )

    @precondition(lambda self: bool(self._older_files()))
    @rule(data=st.data())
    def stale_faiss_file(self, data: st.DataObject) -> None:
        """An older commit's file under the current name: verify must see it when it differs."""
        old = data.draw(st.sampled_from(self._older_files()))
        current = self._current()
        damaged = expected_damage(self.store, current, old.read_bytes())
        event(f"stale file: {damaged or 'matches the database'}")
        shutil.copy(old, current)
        code, out, err = run("verify", "--store", str(self.store))
        if damaged is None:
            assert (code, out.splitlines()[-1]) == (0, "ok"), (out, err)
            return
        self._verify_then_repair(damaged, code, out, err)

    def _questions(self) -> Path:
        file = self.root / "questions.jsonl"
        row = {"id": "1", "question": "q?", "answers": ["a"], "doc_id": "a", "evidence": []}
        file.write_text(json.dumps(row) + "\n")
        return file

    def _verify_then_repair(self, damaged: str, code: int, out: str, err: str) -> None:
        """``verify`` saw exactly ``damaged``; ``verify --repair`` writes the file again."""
        assert code == 1, (out, err)
        assert out.splitlines()[1:] == [f"damaged: {damaged}"], out
        repair = f"s2b verify --repair --store {self.store}"
        assert err == f"s2b: error: {self.store} is damaged; run: {repair}\n"
        code, out, err = run("verify", "--repair", "--store", str(self.store))
        assert (code, err) == (0, ""), (out, err)
        assert out.splitlines()[1] == f"damaged: {damaged}", out
        assert out.splitlines()[2] == (
            "repaired: 0 document(s) rebuilt from their stored text, 0 removed, 0 damaged row(s) "
            "and 0 orphan(s) deleted; 0 file(s) read again from disk; the FAISS index file "
            "written again"
        ), out
        self.verify(repair=False)

    @precondition(lambda self: self._started() and self._current().exists())
    @rule(
        how=st.sampled_from(["truncate", "header", "vectors"]),
        then=st.sampled_from(["query", "verify"]),
        data=st.data(),
    )
    def damage_the_faiss_file(self, how: str, then: str, data: st.DataObject) -> None:
        """A damaged FAISS file: a query says so and answers; verify sees it, --repair mends it.

        A change inside the vectors keeps the file's size and header: only its
        digest (``verify``) tells, so that damage is always followed by ``verify``.
        """
        current = self._current()
        raw = bytearray(current.read_bytes())
        head = header_of(bytes(raw))
        vectors = 0 if head is None else head[4]  # bytes of vectors after the header
        if how == "vectors" and vectors <= 0:
            how = "truncate"
        if how == "truncate":
            raw = raw[: len(raw) // 2]
        elif how == "header":
            raw[0:4] = data.draw(st.binary(min_size=4, max_size=4).filter(lambda b: b != b"IxM2"))
        else:
            at = LAYOUT_HEAD + 4 * data.draw(st.integers(0, vectors // 4 - 1))
            raw[at : at + 4] = bytes(b ^ 0x5A for b in raw[at : at + 4])
            then = "verify"
        event(f"damaged FAISS file: {how}, then {then}")
        problem = expected_problem(self.store, current, bytes(raw))
        assert problem is not None
        current.write_bytes(bytes(raw))
        if then == "verify":
            code, out, err = run("verify", "--store", str(self.store))
            self._verify_then_repair(
                f"1 damaged FAISS index file ({current.name}: {problem})", code, out, err
            )
        else:
            code, out, err = run(
                "query", MARKERS[0], "--store", str(self.store), "--json", "-k", "1"
            )
            assert code == 0, (out, err)
            rows, vectors_ = database_rows(self.store)
            did = (
                "this run built the index from the database and wrote the file again"
                if len(rows)
                else "this run removed it (the store holds no chunks: it needs none)"
            )
            assert err == (
                f"s2b: warning: the FAISS index file of {self.store} is damaged ({problem}); "
                f"{did}; check the disk, and the rest of the store with s2b verify --store "
                f"{self.store}\n"
            )
            assert current.exists() == bool(len(rows))
            if len(rows):
                assert file_matches(current, rows, vectors_)
                assert expected_problem(self.store, current, current.read_bytes()) is None

    @precondition(lambda self: self._started())
    @rule(where=st.sampled_from(["first page", "header"]), data=st.data())
    def damage_the_database(self, where: str, data: st.DataObject) -> None:
        """Damage SQLite can not read past: every command says so; --repair indexes again.

        ``first page``: sixteen bytes at offset 100, the first page's b-tree header
        (its type byte made one no page has). ``header``: the file's first sixteen
        bytes. The new database holds the files ``s2b.json`` lists, as they are on
        disk now.
        """
        database = self.store / DB_FILE
        junk = bytearray(data.draw(st.binary(min_size=16, max_size=16)))
        junk[0] = junk[0] | 0x80  # no page type has it; no file header starts with it
        raw = bytearray(database.read_bytes())
        at = 100 if where == "first page" else 0
        raw[at : at + 16] = junk
        database.write_bytes(bytes(raw))
        event(f"damaged database: {where}")
        line = re.compile(
            rf"s2b: error: the database file {re.escape(str(database))} is damaged \([^\n]+\); "
            rf"run: s2b verify --repair --store {re.escape(str(self.store))} \(it indexes the "
            r"files again into a new database file\)\n"
        )
        folder = str(self.folder)
        for argv in (
            ["list"],
            ["query", MARKERS[0]],
            ["verify"],
            ["index", folder],
            ["delete", str(self.folder / FILES[0])],
            ["eval", "--questions", str(self._questions())],
        ):
            code, out, err = run(*argv, "--store", str(self.store))
            assert (code, out) == (1, ""), (argv, out, err)
            assert line.fullmatch(err), (argv, err)
        code, out, err = run("verify", "--repair", "--store", str(self.store))
        kept = {rel: self.disk[rel] for rel in self.model if rel in self.disk}
        gone = sorted(rel for rel in self.model if rel not in self.disk)
        (aside,) = self.store.glob(f"{DB_FILE}.damaged-*")
        assert aside.read_bytes() == bytes(raw)
        aside.unlink()
        embedded = distinct_leaf_texts(self.store)
        listed = ", as s2b.json lists them" if self.model else ""  # the database: nothing
        assert out.splitlines() == [
            f"rebuilt: {len(kept)} file(s) indexed again into a new database file{listed} "
            f"(0 vector(s) kept from the damaged one, {embedded} embedded)",
            f"the damaged database file is kept as {aside}",
        ], out
        assert err == "".join(
            f"s2b: could not rebuild {self._source(rel)}: the file is gone\n" for rel in gone
        ), err
        assert code == (3 if gone else 0), (out, err)
        self.model = kept
        self.last_stamp = None  # a new database: a new id, its own counter
        self.verify(repair=False)

    # What must hold after every step ------------------------------------------------------

    @invariant()
    def the_store_serves_exactly_the_model(self) -> None:
        if not self._started():
            assert not self.model
            return
        stamp = stamp_of(self.store)
        if self.last_stamp is not None:
            assert stamp[0] == self.last_stamp[0]
            assert stamp[1] >= self.last_stamp[1]  # the commit counter never decreases
        self.last_stamp = stamp
        with actions._reading(open_store(self.store, "fake")) as store:
            leaves = self._docstore_holds_the_model(store)
            self._faiss_holds_the_leaves(store, leaves)
            self._fts5_holds_the_leaves(store, leaves)
            self._queries_serve_the_model(store)
            empty = store.index._index is None
        current = index_file(self.store, stamp)
        if not empty:  # the file of this commit, and no other
            assert faiss_files(self.store) == {current.name}
        else:  # built from no leaves: nothing to write; an earlier commit's file may stay
            assert all(int(name.split(".")[2]) < stamp[1] for name in faiss_files(self.store))

    def _docstore_holds_the_model(self, store: Store) -> dict[str, str]:
        """Each file one source, its nodes spans of its text; the leaves' key -> text."""
        assert set(store.files()) == {self._source(rel) for rel in self.model}
        keys = list(store.docstore.yield_keys())
        manifests = {
            str(m.metadata["source_id"]): m
            for m in store.docstore.mget([k for k in keys if is_manifest_key(k)])
            if m is not None
        }
        assert set(manifests) == {self._source(rel) for rel in self.model}
        wanted = set()
        leaves: dict[str, str] = {}
        for rel, text in self.model.items():
            manifest = manifests[self._source(rel)]
            names = node_keys(manifest)
            wanted |= {*names, str(manifest.id)}
            (doc,) = store.docstore.mget([node_key(nodes_key(manifest), DOC_LEVEL, 0)])
            assert doc is not None
            assert doc.page_content == text
            nodes = dict(zip(names, store.docstore.mget(names), strict=True))
            for name, node in nodes.items():
                assert node is not None, name
                assert node.page_content == text[node.metadata["start"] : node.metadata["end"]]
            leaves.update((k, str(nodes[k].page_content)) for k in leaf_keys(manifest))  # type: ignore[union-attr]
        assert set(keys) == wanted
        return leaves

    @staticmethod
    def _faiss_holds_the_leaves(store: Store, leaves: dict[str, str]) -> None:
        """FAISS (the file this command opened) holds each leaf under its row, as embedded."""
        rows = dict(store.db.conn.execute("SELECT key, row FROM children").fetchall())
        assert set(rows) == set(leaves)
        index = store.index._index
        if not leaves:
            assert index is None or index.ntotal == 0
            return
        assert index is not None
        held = faiss.vector_to_array(index.id_map).astype(np.int64)
        assert sorted(held.tolist()) == sorted(rows.values())
        keys = sorted(leaves)
        want = normalise(HashingEmbeddings(DIM).embed_documents([leaves[k] for k in keys]))
        got = index.reconstruct_batch(np.asarray([rows[k] for k in keys], dtype=np.int64))
        np.testing.assert_allclose(got, want, atol=1e-6)

    @staticmethod
    def _fts5_holds_the_leaves(store: Store, leaves: dict[str, str]) -> None:
        """FTS5 rows are the leaves (rowid = row); each word matches exactly its leaves."""
        conn = store.db.conn
        pairs = conn.execute("SELECT key, row FROM children").fetchall()
        assert sorted(conn.execute("SELECT key, rowid FROM lexical").fetchall()) == sorted(pairs)
        lexical = store.index.lexical_index
        for word in [*VOCAB, *MARKERS]:
            want = {k for k, text in leaves.items() if word in analyze(text)}
            sql = "SELECT key FROM lexical WHERE lexical MATCH ?"
            assert {k for (k,) in conn.execute(sql, (f'"{word}"',))} == want, word
            found = lexical.search_text(word, len(leaves) + 1, None)
            assert {k for k, _ in found} == want, word

    def _queries_serve_the_model(self, store: Store) -> None:
        """Each marker finds its file (first, with or without a budget); nothing else leaks.

        (The store's hashing embedding gives every pair of texts a tiny positive cosine, so on
        a store this small a budget may bring other files' sentences too: the query's scale.)
        """
        retriever = store.retriever
        sources = {self._source(rel): text for rel, text in self.model.items()}
        for rel, marker in zip(FILES, MARKERS, strict=True):
            top = retriever.invoke(marker, **query_options(k=1))
            budgeted = retriever.invoke(marker, **query_options(max_tokens=BUDGET))
            if rel in self.model:
                assert len(top) == 1
                assert top[0].metadata["source_id"] == self._source(rel)
                assert marker in top[0].page_content
                assert budgeted
                assert budgeted[0].metadata["source_id"] == self._source(rel)
                assert marker in budgeted[0].page_content
                assert sum(d.metadata["tokens"] for d in budgeted) <= BUDGET
            for doc in [*top, *budgeted, *retriever.invoke(" ".join(VOCAB[:3]))]:
                source = doc.metadata["source_id"]
                assert source in sources, source  # never a file outside the model
                text = sources[source]
                assert doc.page_content == text[doc.metadata["start"] : doc.metadata["end"]]


MACHINE_SETTINGS = settings(
    max_examples=SEQUENCES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestCliMachine = CliMachine.TestCase
TestCliMachine.settings = MACHINE_SETTINGS


# Bugs the machine found, each shown by one small run -------------------------------------


def _two_commits(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A store indexed twice (a file added): the folder, the store, the first commit's file."""
    folder, store = tmp_path / "folder", tmp_path / "store"
    folder.mkdir()
    (folder / "a.txt").write_text("Ocean tower markalpha.")
    assert run("index", str(folder), "--store", str(store))[0] == 0
    (first,) = store.glob("s2b.*.faiss")
    shutil.copy(first, tmp_path / first.name)
    (folder / "b.txt").write_text("River stone markbeta.")
    assert run("index", str(folder), "--store", str(store))[0] == 0
    return folder, store, tmp_path / first.name


def test_repair_replaces_a_stale_faiss_file(tmp_path: Path) -> None:
    _, store, old = _two_commits(tmp_path)
    (current,) = store.glob("s2b.*.faiss")
    shutil.copy(old, current)  # the first commit's FAISS under the second commit's name
    assert run("verify", "--store", str(store))[0] == 1
    code, out, _ = run("verify", "--repair", "--store", str(store))
    assert code == 0
    size, written = old.stat().st_size, recorded(store)["size"]  # type: ignore[index]
    assert f"damaged: 1 damaged FAISS index file ({current.name}: it is {size} bytes; " in out
    assert f"; {written} were written)" in out
    assert run("verify", "--store", str(store))[:2] == (0, out.splitlines()[0] + "\nok\n")
    code, out, _ = run("query", "markbeta", "--store", str(store), "--json", "-k", "1")
    assert code == 0
    assert [r["text"] for r in json.loads(out)["results"]] == ["River stone markbeta."]


def test_a_reader_answers_when_the_faiss_file_can_not_be_written(tmp_path: Path) -> None:
    """``open``: "a store that can not be written to is read all the same"."""
    folder, store, _ = _two_commits(tmp_path)
    sentences = [f"{w.capitalize()} {v} markgamma." for w in VOCAB for v in VOCAB[:2]]
    (folder / "c.txt").write_text(" ".join(sentences))  # 16 leaves: more than FAISS buffers
    assert run("index", str(folder), "--store", str(store))[0] == 0
    for file in store.glob("s2b.*.faiss"):
        file.unlink()
    real = faiss.write_index

    def disk_full(index: Any, path: str) -> None:
        real(index, "/dev/full")  # FAISS's own error for a write that finds no room

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(faiss, "write_index", disk_full)
        code, out, err = run("query", "markbeta", "--store", str(store), "--json", "-k", "1")
    assert (code, err) == (0, "")
    assert [r["text"] for r in json.loads(out)["results"]] == ["River stone markbeta."]
