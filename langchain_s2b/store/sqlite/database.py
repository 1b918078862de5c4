"""The command line's SQLite database: its tables, transactions and commit counter.

Only :mod:`sqlite3` is imported here, so a command that reads the store's
settings or its list of files (``s2b list``) opens it without loading numpy,
FAISS or LangChain. What is stored and how is in :mod:`langchain_s2b.store.sqlite`.

**The commit counter.** ``meta.commit`` is a number that every write
transaction that changes what a search sees (nodes, leaves, the lexical index,
the indexed files) raises by one, in that same transaction; one that only adds
embeddings to the cache (``write(changes=False)``) does not. A reader that
reads it in its snapshot knows which state it reads: the command line keeps a
FAISS index file named after it, and ``s2b serve`` opens its index again only
when it changed. ``meta.database`` is a random id given when the database is
made, so that a new database file (``verify --repair`` rebuilds one) never
shares a counter value with the old one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 3
"""2: one row per leaf keyed by its key; 3: each leaf a row number (the FAISS id), the
lexical index (FTS5) and the commit counter."""
_CHUNK = 500
"""Keys per ``IN (...)`` query (SQLite's variable limit is far above)."""

LEXICAL_TABLE = "lexical"
PROXIES_TABLE = (
    "CREATE TABLE IF NOT EXISTS proxies (key TEXT PRIMARY KEY, text TEXT NOT NULL, "
    "meta TEXT NOT NULL) WITHOUT ROWID"
)
"""A proxy's text and metadata (JSON), which no docstore node holds (issue 35); made with the
first proxy written, so a store without proxies holds no such table."""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs (key TEXT PRIMARY KEY, text BLOB NOT NULL, meta BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    key TEXT PRIMARY KEY, start INTEGER NOT NULL, stop INTEGER NOT NULL, meta BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, vec BLOB NOT NULL, digest BLOB
);
CREATE TABLE IF NOT EXISTS children (
    row INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, vec INTEGER NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS {LEXICAL_TABLE} USING fts5(
    terms, key UNINDEXED, source UNINDEXED, tokenize = 'ascii'
);
"""
"""``children``: one row per leaf or proxy, ``row`` its FAISS id (a proxy's text and metadata
are in :data:`PROXIES_TABLE`, made with the first proxy). ``lexical``: its terms (FTS5),
``rowid`` = ``children.row`` (see :mod:`langchain_s2b.store.sqlite.sqlite_lexical`)."""


class Database:
    """One SQLite connection in WAL mode, with explicit read and write transactions.

    Args:
        path: the database file (created with its tables when missing).
        timeout: seconds to wait for SQLite's own lock.
    """

    def __init__(self, path: str | Path, *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.conn = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA page_size=8192")  # new files only: five 384-d vectors fill a page
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self._depth = 0
        self.transactions = 0
        """Write transactions begun on this connection (what was written in one is known by it)."""
        self._changes = False
        self._writing = False
        self._digests: bool | None = None

    def create_tables(self, extra: str = "") -> None:
        """Create the tables (and ``extra`` DDL) if they do not exist yet."""
        with self.write():
            for statement in _statements(_SCHEMA + extra):
                self.conn.execute(statement)
            if self.get_meta("schema") is None:
                self.set_meta("schema", str(SCHEMA_VERSION))
            if self.get_meta("database") is None:
                self.set_meta("database", secrets.token_hex(8))
                self.set_meta("commit", "0")

    def has_tables(self) -> bool:
        """Whether the ``meta`` table exists (the database was initialised)."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        return row is not None

    def schema(self) -> int:
        """The schema version the tables have (2 before leaves had row numbers)."""
        value = self.get_meta("schema")
        return int(value) if value is not None and value.isdigit() else 0

    @contextmanager
    def write(self, *, changes: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed whole, or rolled back.

        ``changes``: whether it changes what a search sees (every write does,
        but adding embeddings to the cache); if any nested write does, and a
        row was written, the commit raises the commit counter. Inside a transaction that SQLite
        already ended (it rolls back by itself on a full disk), a nested write
        is refused instead of running alone.
        """
        if self._depth:
            if not self.conn.in_transaction:
                msg = "SQLite ended the transaction after an error; nothing more is written in it"
                raise sqlite3.OperationalError(msg)
            self._depth += 1
            self._changes = self._changes or changes
            try:
                yield self.conn
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        self.transactions += 1
        self._changes = changes
        self._writing = True
        before = self.conn.total_changes
        try:
            yield self.conn
            if self._changes and self.conn.total_changes != before:
                self._count_commit()
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        finally:
            self._depth = 0
            self._writing = False

    def _count_commit(self) -> None:
        self.conn.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE name = 'commit'"
        )

    def _rollback(self) -> None:
        """Roll back, unless SQLite did already (a full disk ends the transaction itself)."""
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the error being raised says more
                self.conn.execute("ROLLBACK")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees one snapshot."""
        if self._depth:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        self._depth = 1
        try:
            yield self.conn
        finally:
            self._depth = 0
            self._end_read()

    def _end_read(self) -> None:
        """End a read transaction; it wrote nothing, so a failure to end it loses nothing."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error:  # e.g. a damaged file: what the reader read says so already
                self._rollback()

    def stamp(self) -> tuple[str, int] | None:
        """``(database id, commit counter)`` of the state being read (``None``: an older store)."""
        rows = dict(
            self.conn.execute(
                "SELECT name, value FROM meta WHERE name IN ('database', 'commit')"
            ).fetchall()
        )
        ident, count = rows.get("database"), rows.get("commit")
        if ident is None or count is None or not str(count).isdigit():
            return None
        return str(ident), int(count)

    def get_meta(self, name: str) -> str | None:
        """A value of the ``meta`` table."""
        row = self.conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, name: str, value: str) -> None:
        """Set a value of the ``meta`` table."""
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))

    def record(
        self, name: str, value: str, *, wait: float, rename: tuple[Path, Path] | None = None
    ) -> bool:
        """Set ``meta[name] = value`` (and first rename ``rename[0]`` to ``rename[1]``) as one step.

        The rename happens inside the write transaction, so two processes that
        record a file take turns and the value that stays describes the last
        file renamed into place. Inside this connection's own write
        transaction the value joins it; otherwise (e.g. inside a command's
        read snapshot) a second connection writes it, waiting at most
        ``wait`` seconds for another writer. When it can not, the file is
        renamed all the same and ``False`` returned: a later writer records
        it. A ``meta`` value is not a commit: the counter does not move.
        """
        if self._writing:
            if rename is not None:
                os.replace(*rename)
            self.set_meta(name, value)
            return True
        conn = None
        try:
            conn = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # busy, read-only, damaged: the file goes in unrecorded
            if conn is not None:
                conn.close()
            if rename is not None:
                os.replace(*rename)
            return False
        try:
            if rename is not None:
                os.replace(*rename)
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))
            conn.execute("COMMIT")
        except sqlite3.Error:
            return False
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            conn.close()
        return True

    def has_vector_digests(self) -> bool:
        """Whether the ``vectors`` table has its ``digest`` column (stores made since it came)."""
        if self._digests is None:
            columns = [row[1] for row in self.conn.execute("PRAGMA table_info(vectors)")]
            self._digests = "digest" in columns
        return self._digests

    def add_vector_digests(self) -> None:
        """Give an older store the ``digest`` column, filled from the vectors as they are."""
        if self.has_vector_digests():
            return
        with self.write(changes=False) as conn:
            conn.execute("ALTER TABLE vectors ADD COLUMN digest BLOB")
            rows = conn.execute("SELECT id, hash, vec FROM vectors").fetchall()
            conn.executemany(
                "UPDATE vectors SET digest = ? WHERE id = ?",
                [(vector_digest(h, v), i) for i, h, v in rows],
            )
        self._digests = True

    def insert_vectors(self, rows: Sequence[tuple[bytes, bytes]]) -> None:
        """Store ``(hash, vector bytes)`` rows not stored yet, with their digests."""
        if self.has_vector_digests():
            self.conn.executemany(
                "INSERT OR IGNORE INTO vectors (hash, vec, digest) VALUES (?, ?, ?)",
                [(h, v, vector_digest(h, v)) for h, v in rows],
            )
        else:
            self.conn.executemany("INSERT OR IGNORE INTO vectors (hash, vec) VALUES (?, ?)", rows)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def upgrade(db: Database) -> bool:
    """Bring a store of schema 2 to schema 3 in one write transaction; whether it did.

    Each leaf gets its row number, the lexical table and the commit counter are
    made; the caller fills the lexical table (it needs the leaves' text). Call
    under the writer lock.
    """
    if db.schema() >= SCHEMA_VERSION:
        return False
    with db.write() as conn:
        conn.execute("ALTER TABLE children RENAME TO children_v2")
        for statement in _statements(_SCHEMA):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO children (key, vec) SELECT key, vec FROM children_v2 ORDER BY key"
        )
        conn.execute("DROP TABLE children_v2")
        db.set_meta("schema", str(SCHEMA_VERSION))
        if db.get_meta("database") is None:
            db.set_meta("database", secrets.token_hex(8))
            db.set_meta("commit", "0")
    return True


def dangling_children(db: Database) -> int:
    """How many children point at a vector row that is gone (a cheap check)."""
    sql = "SELECT count(*) FROM children WHERE vec NOT IN (SELECT id FROM vectors)"
    return int(db.conn.execute(sql).fetchone()[0])


def _statements(script: str) -> list[str]:
    """The statements of a DDL script (none of ours holds a ``;`` inside)."""
    return [part.strip() for part in script.split(";") if part.strip()]


def vector_digest(hash_: bytes, vec: bytes) -> bytes:
    """The digest of a vector row: SHA-256 of its text hash and its bytes (first 64 bits)."""
    return hashlib.sha256(bytes(hash_) + bytes(vec)).digest()[:8]


def chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def marks(n: int) -> str:
    """``?,?,...`` for ``n`` parameters."""
    return ",".join("?" * n)
