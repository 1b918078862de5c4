"""The command line's store folder: its database file, settings, indexed files and lock.

.. code-block:: text

    DIR/s2b.sqlite                 nodes, manifests, child vectors, the lexical index,
                                   indexed files, settings (one SQLite database)
    DIR/s2b.<id>.<commit>.faiss    the FAISS index of the database's last commit
    DIR/s2b.json                   the settings and the indexed files' paths, again: what
                                   verify --repair indexes when the database can not be read
    DIR/s2b.lock                   held by the one run that writes (index, delete, verify --repair)

``s2b.json`` (:class:`Listing`) is written (a temporary file renamed into
place) by every run that writes the store, at its end, from what the database
then holds, with a SHA-256 of its content; a store made before it has none
until its next writer. A database file whose first pages are damaged can not
say which model the store uses nor which files it indexed: ``s2b verify
--repair`` reads them from here and indexes those files again into a new
database file.

Writers take an inter-process lock (``filelock``) for their whole run, so two
runs never interleave; a second writer waits (or, with ``--no-wait``, says in
one line that the store is in use). Readers take no lock: they read one SQLite
snapshot (WAL), so they see the store as it was before or after a writer's
commit, never half of one. See :mod:`langchain_s2b.store.sqlite` for how nodes,
manifests and the child index commit together.

This module imports only :mod:`sqlite3` and the light parts of the package: a
command that reads settings or the list of files (``s2b list``) loads neither
numpy, FAISS nor LangChain. :mod:`.index_dir` opens the store to search it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from langchain_s2b.cli import specs
from langchain_s2b.cli.errors import DamagedDatabaseError, UserError
from langchain_s2b.cli.options import INDEX_MODE
from langchain_s2b.store.base import write_text_atomic
from langchain_s2b.store.sqlite import Database, dangling_children

DB_FILE = "s2b.sqlite"
LOCK_FILE = "s2b.lock"
FORMAT = "s2b-cli"
FORMAT_VERSION = "2"
OLD_LAYOUT = "s2b-cli.json"
FAISS_FILES = "s2b.*.*.faiss"
"""The FAISS index files (``store.index_file.INDEX_FILE``)."""
LISTING_FILE = "s2b.json"
"""The settings and the indexed files' paths, beside the database (:class:`Listing`)."""
SETTINGS = (
    "format",
    "format_version",
    "embedding",
    "tree",
    "headers",
    "context_model",
    "proxies",
    "proxy_model",
)
"""The ``meta`` values that are the store's settings (the rest is the database's own)."""
HEADERS = "headers"
"""Setting: ``"on"`` when chunks are embedded under their title and section path."""
CONTEXT_MODEL = "context_model"
"""Setting: the chat model (``provider:model``) that writes each paragraph's context."""
PROXIES = "proxies"
"""Setting: the model-written proxies (``propositions``, ``summaries``, ``questions``; ``""``)."""
PROXY_MODEL = "proxy_model"
"""Setting: the chat model (``provider:model``) that writes the proxies."""
PENDING = "embedded_pending"
"""``"1"`` from the run that changed the headers or context setting until a run re-indexed
every file with it (an interrupted run leaves it: the next run goes on re-indexing)."""


@dataclass(frozen=True)
class Embedded:
    """What a store embeds beside each chunk's text: a header, a model's context."""

    headers: bool
    context_model: str | None = None
    proxies: str | None = None
    """Model-written proxies: ``"propositions"``, ``"summaries"``, ``"questions"`` (or none)."""
    proxy_model: str | None = None

    def describe(self) -> str:
        """``headers on, context model anthropic:claude-3-5-haiku-latest`` (for messages)."""
        model = f"context model {self.context_model}" if self.context_model else "no context model"
        said = f"headers {'on' if self.headers else 'off'}, {model}"
        if self.proxies:
            said += f", {self.proxies} by {self.proxy_model}"
        return said


def read_embedded(db: Database) -> Embedded:
    """The store's recorded setting (a store made before it was recorded: off, no model)."""
    headers = db.get_meta(HEADERS)
    model = db.get_meta(CONTEXT_MODEL)
    proxies = db.get_meta(PROXIES) or None
    writer = db.get_meta(PROXY_MODEL) or None
    return Embedded(headers == "on", model or None, proxies, writer if proxies else None)


def listed_embedded(listing: Listing) -> Embedded:
    """The setting ``s2b.json`` records (a listing written before it: off, no model)."""
    proxies = listing.settings.get(PROXIES) or None
    return Embedded(
        listing.settings.get(HEADERS) == "on",
        listing.settings.get(CONTEXT_MODEL) or None,
        proxies,
        (listing.settings.get(PROXY_MODEL) or None) if proxies else None,
    )


def record_embedded(db: Database, embedded: Embedded, *, pending: bool) -> None:
    """Record the setting (inside the caller's transaction); ``pending``: every file again."""
    db.set_meta(HEADERS, "on" if embedded.headers else "off")
    db.set_meta(CONTEXT_MODEL, embedded.context_model or "")
    if embedded.proxies:  # recorded only when set: a store without them lists as before
        db.set_meta(PROXIES, embedded.proxies)
        db.set_meta(PROXY_MODEL, embedded.proxy_model or "")
    else:
        db.conn.execute("DELETE FROM meta WHERE name IN (?, ?)", (PROXIES, PROXY_MODEL))
    if pending:
        db.set_meta(PENDING, "1")


def reindex_pending(db: Database) -> bool:
    """Whether a changed setting still has files to re-index."""
    return db.get_meta(PENDING) == "1"


def finish_reindex(db: Database) -> None:
    """Every file is indexed with the recorded setting (inside the caller's transaction)."""
    db.conn.execute("DELETE FROM meta WHERE name = ?", (PENDING,))


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


def files(db: Database) -> dict[str, FileRow]:
    """Every indexed file by path (a row whose bytes are damaged is left out)."""
    rows = db.conn.execute("SELECT * FROM files ORDER BY path").fetchall()
    found = {}
    for r in rows:
        row = _file_row(r)
        if row is not None:
            found[row.path] = row
    return found


def damaged_files(db: Database) -> list[str]:
    """Paths of ``files`` rows whose bytes are damaged."""
    rows = db.conn.execute("SELECT * FROM files ORDER BY path").fetchall()
    return [str(r[0]) for r in rows if _file_row(r) is None]


def counts(db: Database) -> dict[str, int]:
    """Files, documents (distinct, over the files), chunks and vectors in the store."""
    rows = files(db)
    conn = db.conn
    return {
        "files": len(rows),
        "documents": len({s for row in rows.values() for s in row.sources}),
        "chunks": int(conn.execute("SELECT count(*) FROM children").fetchone()[0]),
        "vectors": int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0]),
    }


def dangling_chunks(db: Database) -> int:
    """Chunks whose vector row is gone (damage a cheap query can see)."""
    return dangling_children(db)


def counts_line(counts: dict[str, int]) -> str:
    """``3 file(s), 4 document(s), 120 chunk(s), 118 vector(s)``."""
    return ", ".join(
        f"{counts[name]} {name[:-1]}(s)" for name in ("files", "documents", "chunks", "vectors")
    )


def size(directory: Path) -> int:
    """Bytes the store takes on disk (the database, its log, the FAISS index, the lock)."""
    names = [DB_FILE, f"{DB_FILE}-wal", LOCK_FILE, LISTING_FILE]
    names += [p.name for p in directory.glob(FAISS_FILES)]
    return sum((directory / n).stat().st_size for n in names if (directory / n).exists())


def put_file(db: Database, row: FileRow) -> None:
    """Record an indexed file (inside the caller's transaction)."""
    db.conn.execute(
        "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)",
        (row.path, row.size, row.mtime_ns, row.sha256, json.dumps(row.sources), row.chunks),
    )


def drop_file(db: Database, path: str) -> None:
    """Forget an indexed file (inside the caller's transaction)."""
    db.conn.execute("DELETE FROM files WHERE path = ?", (path,))


def _file_row(r: tuple[Any, ...]) -> FileRow | None:
    """A ``files`` row, or ``None`` when its bytes no longer decode to one."""
    try:
        path, size, mtime_ns, sha256, sources, chunks = r
        listed = json.loads(sources)
    except (ValueError, TypeError):
        return None
    fields_ok = (
        isinstance(path, str)
        and isinstance(size, int)
        and isinstance(mtime_ns, int)
        and isinstance(sha256, str)
        and isinstance(listed, list)
        and all(isinstance(x, str) for x in listed)
        and isinstance(chunks, int)
    )
    return FileRow(path, size, mtime_ns, sha256, listed, chunks) if fields_ok else None


def _db_path(directory: Path) -> Path:
    return directory / DB_FILE


# The listing beside the database ------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """The store's settings and the paths of its indexed files, as ``s2b.json`` holds them."""

    settings: dict[str, str]
    files: list[str]

    def body(self) -> dict[str, Any]:
        """The content the digest covers."""
        return {"settings": dict(sorted(self.settings.items())), "files": sorted(self.files)}

    def dumps(self) -> str:
        """The file's text: the content and its SHA-256 (ASCII JSON)."""
        body = self.body()
        return json.dumps({**body, "sha256": _digest(body)}, indent=1) + "\n"


def _digest(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def listing_of(db: Database) -> Listing:
    """The listing of what the database holds (read in one snapshot).

    Raises:
        ValueError: a ``files`` row or a setting is damaged: a listing made
            from it would replace a sound one with a wrong one.
    """
    with db.read():
        rows = dict(db.conn.execute("SELECT name, value FROM meta").fetchall())
        found = files(db)
        damaged = damaged_files(db)
    settings = {k: rows[k] for k in SETTINGS if isinstance(rows.get(k), str)}
    if damaged or not {"format", "format_version", "embedding"} <= set(settings):
        msg = "the database's list of files or its settings are damaged"
        raise ValueError(msg)
    return Listing(settings, list(found))


def write_listing(directory: Path, db: Database) -> None:
    """Write ``s2b.json`` from the database (call at the end of a run that writes the store).

    Nothing is written when what the database lists is damaged (``ValueError``).
    """
    write_text_atomic(directory / LISTING_FILE, listing_of(db).dumps())


def read_listing(directory: Path) -> Listing | None:
    """``s2b.json`` (``None``: there is none); one line naming the problem when it is damaged."""
    file = directory / LISTING_FILE
    if not os.path.lexists(file):
        return None
    try:
        if not file.is_file():
            msg = "it is not a regular file"
            raise ValueError(msg)
        found = json.loads(file.read_bytes().decode("ascii"))
        body = {"settings": found["settings"], "files": found["files"]}
        if found["sha256"] != _digest(body):
            msg = "its content is not the one its SHA-256 was made of"
            raise ValueError(msg)
        settings, paths = body["settings"], body["files"]
        if not isinstance(settings, dict) or not isinstance(paths, list):
            msg = "it does not hold settings and files"
            raise ValueError(msg)
        if not all(isinstance(v, str) for v in [*settings.values(), *paths]):
            msg = "it does not hold settings and files"
            raise ValueError(msg)
    except OSError as err:
        msg = f"cannot read {file} ({err.strerror or err})"
        raise UserError(msg) from None
    except (ValueError, TypeError, KeyError) as err:
        msg = f"{file} is damaged ({type(err).__name__}: {err})"
        raise UserError(msg) from None
    return Listing(settings, paths)


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
    if directory.is_dir() and not _db_path(directory).exists() and _has_listing(directory):
        msg = f"the database file {_db_path(directory)} is missing; {_repair_hint(directory)}"
        raise DamagedDatabaseError(msg)
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


def connect(directory: Path) -> Database:
    """The store's database, opened (one line naming the problem when it can not be)."""
    try:
        return Database(_db_path(directory))
    except sqlite3.Error as err:
        raise opening_error(err, directory) from None


def opening_error(err: sqlite3.Error, directory: Path) -> UserError:
    """One line for an error while opening the store (:class:`DamagedDatabaseError`: damage)."""
    line = store_error(err, directory, opening=True)
    return DamagedDatabaseError(line) if unreadable(err, directory) else UserError(line)


def unreadable(err: sqlite3.Error | OSError, directory: Path) -> bool:
    """Whether ``err`` says the store's database file is damaged (beyond a transient error).

    "file is not a database" (or "unsupported file format": a damaged header)
    counts when the store's listing (``s2b.json``) says that an s2b database
    was there.
    """
    kind = _error_kind(err)
    return kind == "corrupt" or (kind == "notadb" and _has_listing(directory))


def _has_listing(directory: Path) -> bool:
    return os.path.lexists(directory / LISTING_FILE)


def _repair_hint(directory: Path) -> str:
    return (
        f"run: s2b verify --repair --store {directory} (it indexes the files again into a new "
        "database file)"
    )


def store_error(err: sqlite3.Error | OSError, directory: Path, *, opening: bool = False) -> str:
    """One line for a database error: a full disk, a damaged file, or what SQLite said.

    ``opening``: the error came while opening the store and reading its settings.
    """
    where = _db_path(directory)
    kind = _error_kind(err)
    if kind == "full" or (kind == "io" and _disk_is_full(directory)):
        return (
            f"the disk holding {directory} is full: nothing of the write that failed was kept; "
            "free some space and run the command again"
        )
    if kind == "io":
        return f"cannot read or write {where} ({err}); check the disk"
    if unreadable(err, directory):
        return f"the database file {where} is damaged ({err}); {_repair_hint(directory)}"
    if kind == "notadb" or (kind is None and opening):
        return f"{where} is not an s2b index database ({err})"
    return f"{where}: {err}"


_KINDS = {13: "full", 10: "io", 26: "notadb", 11: "corrupt"}
"""SQLite's result codes (``sqlite3.SQLITE_FULL``... from Python 3.11) and what they mean here."""
_MESSAGES = {
    "database or disk is full": "full",
    "disk i/o error": "io",
    "file is not a database": "notadb",
    "database disk image is malformed": "corrupt",
    "malformed database schema": "corrupt",
    "unsupported file format": "notadb",
    "could not decode to utf-8": "corrupt",  # we only write UTF-8: changed bytes
}


def _error_kind(err: sqlite3.Error | OSError) -> str | None:
    if isinstance(err, OSError):
        return "full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else None
    code = getattr(err, "sqlite_errorcode", None)  # Python 3.11+; extended codes: low byte
    if isinstance(code, int) and code & 0xFF in _KINDS:
        return _KINDS[code & 0xFF]
    text = str(err).lower()
    return next((kind for message, kind in _MESSAGES.items() if message in text), None)


def _disk_is_full(directory: Path) -> bool:
    """Whether the disk holding ``directory`` has (nearly) no room left."""
    try:
        return shutil.disk_usage(directory).free < _ROOM
    except OSError:
        return False


_ROOM = 1 << 20
"""Free bytes below which a disk I/O error is taken for a full disk."""


def read_settings(db: Database, directory: Path) -> dict[str, str]:
    """The store's recorded settings; one line naming the problem when they are bad."""
    where = _db_path(directory)
    # With a listing beside it, the database was an s2b store's: what is wrong is damage.
    wrong = DamagedDatabaseError if _has_listing(directory) else UserError
    hint = f"; {_repair_hint(directory)}" if wrong is DamagedDatabaseError else ""
    try:
        if not db.has_tables():
            if wrong is DamagedDatabaseError:
                msg = f"the database file {where} has lost its tables{hint}"
            else:
                msg = f"{where} is empty: the first s2b index run into it has not finished"
            raise wrong(msg)
        rows = dict(db.conn.execute("SELECT name, value FROM meta").fetchall())
    except sqlite3.DatabaseError as err:
        raise opening_error(err, directory) from None
    if rows.get("format") != FORMAT or rows.get("format_version") != FORMAT_VERSION:
        msg = (
            f"bad configuration in {where}: format {rows.get('format')!r} version "
            f"{rows.get('format_version')!r}, expected {FORMAT!r} version {FORMAT_VERSION}{hint}"
        )
        raise wrong(msg)
    try:
        specs.parse_spec(rows.get("embedding", ""))
    except UserError:
        msg = f"bad configuration in {where}: embedding {rows.get('embedding')!r}{hint}"
        raise wrong(msg) from None
    if rows.get(HEADERS, "off") not in ("on", "off"):
        msg = f"bad configuration in {where}: headers {rows.get(HEADERS)!r}{hint}"
        raise wrong(msg)
    return rows


def open_database(directory: Path, wanted: str | None = None) -> tuple[Database, str]:
    """The store's database and its embedding (``provider:model``), checked; one line if not.

    An embedding other than the one the store was built with is refused.
    """
    _check_directory(directory, creating=False)
    db = connect(directory)
    settings = read_settings(db, directory)
    recorded = settings["embedding"]
    if wanted is not None and specs.parse_spec(wanted) != specs.parse_spec(recorded):
        db.close()
        msg = (
            f"{directory} was indexed with embedding {recorded!r}, not "
            f"{specs.parse_spec(wanted)!r}; query it with --embedding {recorded} (or none)"
        )
        raise UserError(msg)
    return db, specs.parse_spec(recorded)


def initialise(db: Database, spec: str, embedded: Embedded) -> None:
    """Tables and settings of a new store, in one transaction: a reader sees both or neither."""
    with db.write():
        db.create_tables(_FILES_TABLE)
        for name, value in (
            ("format", FORMAT),
            ("format_version", FORMAT_VERSION),
            ("embedding", spec),
            ("tree", INDEX_MODE),
        ):
            db.set_meta(name, value)
        record_embedded(db, embedded, pending=False)


def replace_database(directory: Path, fresh: Path, *, keep: bool = False) -> Path | None:
    """Put the database file ``fresh`` (closed, its log merged) in place of the store's own.

    ``keep``: the old file (and its log) stays, under ``s2b.sqlite.damaged-<time>``;
    its name is returned. The switch is one rename: a command that opens the
    store sees the old file or the new one.
    """
    current = _db_path(directory)
    aside = None
    if keep and current.exists():
        aside = _aside_name(directory)
        for suffix in ("", "-wal"):
            if _size_of(Path(f"{current}{suffix}")):
                _link_or_copy(Path(f"{current}{suffix}"), Path(f"{aside}{suffix}"))
    for suffix in ("-wal", "-shm"):
        Path(f"{current}{suffix}").unlink(missing_ok=True)
    os.replace(fresh, current)
    for old in directory.glob(FAISS_FILES):  # the old database's: never the new one's
        old.unlink(missing_ok=True)
    return aside


def _aside_name(directory: Path) -> Path:
    """``s2b.sqlite.damaged-<time>``: never an existing name (``-2``, ``-3``... in one second)."""
    stamp = directory / f"{DB_FILE}.damaged-{time.strftime('%Y%m%dT%H%M%S')}"
    name, n = stamp, 1
    while any(os.path.lexists(f"{name}{suffix}") for suffix in ("", "-wal")):
        n += 1
        name = Path(f"{stamp}-{n}")
    return name


def _size_of(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


def _link_or_copy(source: Path, target: Path) -> None:
    """A second name for ``source`` (a copy where the file system has no hard links)."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def check_listing(directory: Path, db: Database) -> str | None:
    """What is wrong with ``s2b.json`` against the database (``None``: it matches, or is absent).

    Call in a read transaction of the database's last commit.
    """
    try:
        listed = read_listing(directory)
    except UserError as err:
        return str(err)
    if listed is None:
        return None
    try:
        held = listing_of(db)
    except ValueError as err:
        return str(err)
    if listed.body() != held.body():
        return f"{directory / LISTING_FILE} does not list what the database holds"
    return None


@contextmanager
def writer_lock(
    directory: Path, *, wait: bool, err: TextIO = sys.stderr, repair: bool = False
) -> Iterator[None]:
    """Hold the store's inter-process writer lock for the ``with`` block.

    ``repair``: the run repairs the store (``verify --repair``), which may
    find its database file missing.
    """
    try:
        from filelock import FileLock, Timeout
    except ImportError:
        msg = 's2b needs filelock to write an index safely: pip install "langchain-s2b[cli]"'
        raise UserError(msg) from None

    def unstarted() -> bool:
        return not _db_path(directory).exists() and not (repair and _has_listing(directory))

    if unstarted() and not (directory / LOCK_FILE).exists():  # another run may be creating it:
        _check_directory(directory, creating=True)  # checked once this run holds the lock
    created = not directory.exists()
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
        if unstarted():  # the run that held the lock may have made it meanwhile
            _check_directory(directory, creating=True)
        yield
    except BaseException:
        lock.release()
        if created:
            _remove_unstarted(directory)
        raise
    lock.release()


def _remove_unstarted(directory: Path) -> None:
    """Remove a store folder this run made and left without a started database."""
    db = _db_path(directory)
    if db.exists():
        try:
            conn = sqlite3.connect(db)
            try:
                started = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
                ).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return
        if started:
            return
    names = (LOCK_FILE, DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", f"{DB_FILE}-journal")
    for name in names:
        (directory / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something else is in it: keep it
        directory.rmdir()
