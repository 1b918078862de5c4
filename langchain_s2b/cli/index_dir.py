"""The command line's on-disk index: one SQLite database, its writer lock, open and create.

.. code-block:: text

    DIR/s2b.sqlite   nodes, manifests, child vectors, indexed files, settings
    DIR/s2b.lock     held by the one run that writes (index, delete, verify --repair)

Writers take an inter-process lock (``filelock``) for their whole run, so two
runs never interleave; a second writer waits (or, with ``--no-wait``, says in
one line that the store is in use). Readers take no lock: they read one SQLite
snapshot (WAL), so they see the store as it was before or after a writer's
commit, never half of one. See :mod:`langchain_s2b.store.sqlite` for how nodes,
manifests and the child index commit together.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli import models
from langchain_s2b.cli.errors import UserError
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.sqlite import CachedEmbeddings, Database, SQLiteDocStore, SQLiteFaissIndex

DB_FILE = "s2b.sqlite"
LOCK_FILE = "s2b.lock"
FORMAT = "s2b-cli"
FORMAT_VERSION = "2"
INDEX_MODE = "multilevel"
"""The tree the CLI builds: sentences < paragraphs < sections < document."""
PARENT_LEVELS = ("paragraph", "section", "doc")
PARENT_LEVEL = "section"
"""Parent mode returns sections: about the size of the Python API's default parents (~1,200
tokens), where the tree's nearest parent, a paragraph, is often one line of a real document."""
OLD_LAYOUT = "s2b-cli.json"

_FILES_TABLE = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL, sources TEXT NOT NULL, chunks INTEGER NOT NULL
) WITHOUT ROWID
"""


@dataclass(frozen=True)
class FileRow:
    """An indexed file: how it looked when indexed, and the sources it gave."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    sources: list[str]
    chunks: int


class Store:
    """An open index directory: its database, retriever and embedding cache.

    Args:
        directory: the index directory.
        db: its open database.
        spec: the store's embedding (a normalised ``provider:model``).
        embedding: that model, already made (else it is made here).
        search: whether this run searches. A writer that never searches
            (``index``, ``delete``) opens without the in-memory BM25 index,
            which is not stored: a search run builds it from FAISS when it
            first needs it, and a writer's copy would only be thrown away
            (filled with every leaf of the store at its first write).
    """

    def __init__(
        self,
        directory: Path,
        db: Database,
        spec: str,
        *,
        embedding: Embeddings | None = None,
        search: bool = True,
    ) -> None:
        self.directory = directory
        self.db = db
        self.spec = spec
        model = models.make_embedding(spec) if embedding is None else embedding
        self.cache = CachedEmbeddings(model, db)
        self.index = SQLiteFaissIndex(self.cache)
        self.docstore = SQLiteDocStore(db)
        self.retriever = SmallToBigRetriever(
            vectorstore=self.index,
            docstore=self.docstore,
            mode=INDEX_MODE,
            parent_level=PARENT_LEVEL,
            hybrid=search,
        )

    def restore(self) -> None:
        """Fill the in-memory FAISS index from the database (one snapshot)."""
        with self.db.read():
            self.index.restore(self.docstore)

    # Indexed files ------------------------------------------------------------------

    def files(self) -> dict[str, FileRow]:
        """Every indexed file by path."""
        rows = self.db.conn.execute("SELECT * FROM files ORDER BY path").fetchall()
        return {r[0]: FileRow(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows}

    def put_file(self, row: FileRow) -> None:
        """Record an indexed file (inside the caller's transaction)."""
        self.db.conn.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)",
            (row.path, row.size, row.mtime_ns, row.sha256, json.dumps(row.sources), row.chunks),
        )

    def drop_file(self, path: str) -> None:
        """Forget an indexed file (inside the caller's transaction)."""
        self.db.conn.execute("DELETE FROM files WHERE path = ?", (path,))

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def _db_path(directory: Path) -> Path:
    return directory / DB_FILE


def _check_directory(directory: Path, *, creating: bool) -> None:
    if directory.exists() and not directory.is_dir():
        msg = f"--store {directory} exists and is not a directory"
        raise UserError(msg)
    if (directory / OLD_LAYOUT).exists() and not _db_path(directory).exists():
        msg = (
            f"--store {directory} was made by an older s2b (index/ and parents/); "
            "index your files into a new --store"
        )
        raise UserError(msg)
    if not creating:
        if not directory.is_dir():
            msg = f"no index at --store {directory} (run: s2b index PATH... --store {directory})"
            raise UserError(msg)
        if not _db_path(directory).exists():
            msg = f"{directory} is not an s2b index (no {DB_FILE}); run s2b index first"
            raise UserError(msg)
        return
    if directory.is_dir() and not _db_path(directory).exists():
        extra = [p.name for p in directory.iterdir() if p.name != LOCK_FILE]
        if extra:
            msg = f"--store {directory} is a non-empty directory that is not an s2b index"
            raise UserError(msg)


def _connect(directory: Path) -> Database:
    try:
        return Database(_db_path(directory))
    except sqlite3.Error as err:
        msg = f"{_db_path(directory)} is not an s2b index database ({err})"
        raise UserError(msg) from None


def read_settings(db: Database, directory: Path) -> dict[str, str]:
    """The store's recorded settings; one line naming the problem when they are bad."""
    where = _db_path(directory)
    try:
        if not db.has_tables():
            msg = f"{where} is empty: the first s2b index run into it has not finished"
            raise UserError(msg)
        rows = dict(db.conn.execute("SELECT name, value FROM meta").fetchall())
    except sqlite3.DatabaseError as err:
        msg = f"{where} is not an s2b index database ({err})"
        raise UserError(msg) from None
    if rows.get("format") != FORMAT or rows.get("format_version") != FORMAT_VERSION:
        msg = (
            f"bad configuration in {where}: format {rows.get('format')!r} version "
            f"{rows.get('format_version')!r}, expected {FORMAT!r} version {FORMAT_VERSION}"
        )
        raise UserError(msg)
    try:
        models.parse_spec(rows.get("embedding", ""))
    except UserError:
        msg = f"bad configuration in {where}: embedding {rows.get('embedding')!r}"
        raise UserError(msg) from None
    return rows


def open_store(
    directory: Path,
    wanted: str | None = None,
    *,
    embedding: Embeddings | None = None,
    search: bool = True,
) -> Store:
    """Open an existing index; refuse an embedding other than the one it was built with.

    ``embedding`` is the store's model when the caller made it already (it is
    then not made a second time); ``search=False``: see :class:`Store`.
    """
    _check_directory(directory, creating=False)
    db = _connect(directory)
    settings = read_settings(db, directory)
    recorded = settings["embedding"]
    if wanted is not None and models.parse_spec(wanted) != models.parse_spec(recorded):
        db.close()
        msg = (
            f"{directory} was indexed with embedding {recorded!r}, not "
            f"{models.parse_spec(wanted)!r}; query it with --embedding {recorded} (or none)"
        )
        raise UserError(msg)
    return Store(directory, db, models.parse_spec(recorded), embedding=embedding, search=search)


def open_or_create(directory: Path, wanted: str | None, *, search: bool = True) -> Store:
    """Open the index in ``directory``, creating it (call under the writer lock).

    The embedding model is made once (a new store: before anything is
    written, so that a model that can not start leaves no store behind).
    """
    if _db_path(directory).exists():
        db = _connect(directory)
        started = db.has_tables()
        db.close()
        if started:
            return open_store(directory, wanted, search=search)
        # else: a first run died before its first commit; start again (we hold the lock)
    else:
        _check_directory(directory, creating=True)
    spec = models.parse_spec(wanted or models.DEFAULT)
    model = models.make_embedding(spec)  # fail before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    db = _connect(directory)
    with db.write():  # tables and settings in one transaction: a reader sees both or neither
        db.create_tables(_FILES_TABLE)
        for name, value in (
            ("format", FORMAT),
            ("format_version", FORMAT_VERSION),
            ("embedding", spec),
            ("tree", INDEX_MODE),
        ):
            db.set_meta(name, value)
    db.close()
    return open_store(directory, wanted, embedding=model, search=search)


@contextmanager
def writer_lock(directory: Path, *, wait: bool, err: TextIO = sys.stderr) -> Iterator[None]:
    """Hold the store's inter-process writer lock for the ``with`` block."""
    try:
        from filelock import FileLock, Timeout
    except ImportError:
        msg = 's2b needs filelock to write an index safely: pip install "langchain-s2b[cli]"'
        raise UserError(msg) from None
    if not _db_path(directory).exists():
        _check_directory(directory, creating=True)
    directory.mkdir(parents=True, exist_ok=True)
    lock: Any = FileLock(str(directory / LOCK_FILE))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            msg = (
                f"{directory} is in use by another s2b run that writes to it; "
                "try again when it ends (or leave out --no-wait to wait)"
            )
            raise UserError(msg) from None
        print(f"s2b: waiting for another s2b run to finish writing {directory} ...", file=err)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
