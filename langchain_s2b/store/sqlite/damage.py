"""Damage in the database: rows SQLite can not read, vectors whose bytes changed, orphans.

:func:`find_damage` finds them and :func:`mend` removes them, so that the
files the index came from can be indexed again (``s2b verify --repair``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.store.sqlite.cached_embeddings import _vectors_of_common_size, text_hash
from langchain_s2b.store.sqlite.database import (
    LEXICAL_TABLE,
    Database,
    chunks,
    marks,
    vector_digest,
)
from langchain_s2b.store.sqlite.docstore import SQLiteDocStore

__all__ = ["Damage", "file_damage", "find_damage", "mend", "readable_rows", "salvage_vectors"]

_marks = marks


# Damage -----------------------------------------------------------------------------------


@dataclass
class Damage:
    """Rows whose bytes fail their checks (:func:`find_damage`); :func:`mend` removes them."""

    database: list[str] = field(default_factory=list)
    """What SQLite's own check (``PRAGMA integrity_check``) found wrong with the file."""
    unreadable: list[str] = field(default_factory=list)
    """Docstore keys whose row no longer decodes."""
    vectors: list[int] = field(default_factory=list)
    """Vector ids whose bytes fail their digest (or their size, or are not finite)."""
    children: list[str] = field(default_factory=list)
    """Leaf keys whose vector is absent, damaged, or was made for another text."""
    unchecked: int = 0
    """Vectors without a digest (an older store; :meth:`Database.add_vector_digests`)."""

    @property
    def ok(self) -> bool:
        """Nothing damaged."""
        return not (self.database or self.unreadable or self.vectors or self.children)


def file_damage(db: Database) -> list[str]:
    """What SQLite's own check of the file finds wrong; ``[]``: none.

    ``PRAGMA integrity_check``, not ``quick_check``: only the full check sees an
    index whose entries no longer match its table's rows (a damaged page of the
    key index makes lookups miss rows that a scan finds, and a repair that
    trusts it writes duplicates).
    """
    with db.read():
        try:
            found = [str(row[0]) for row in db.conn.execute("PRAGMA integrity_check")]
        except sqlite3.DatabaseError as err:
            found = [str(err)]
    return [] if found == ["ok"] else found


def find_damage(db: Database, docstore: SQLiteDocStore) -> Damage:
    """Check every row of a sound file (call in a transaction; :func:`file_damage` first).

    The text and metadata rows, every vector's digest, and that each child's
    vector is the one made for its text.
    """
    damage = Damage()
    docstore.unreadable = set()
    keys = list(docstore.yield_keys())
    for part in chunks(keys):
        docstore.mget(part)
    damage.unreadable = sorted(docstore.unreadable)
    damage.vectors, damage.unchecked = _damaged_vectors(db)
    damage.children = _damaged_children(db, docstore, set(damage.vectors))
    return damage


def _damaged_vectors(db: Database) -> tuple[list[int], int]:
    """Ids of vectors that fail their checks, and how many have no digest to check."""
    digests = db.has_vector_digests()
    sql = f"SELECT id, hash, vec, {'digest' if digests else 'NULL'} FROM vectors"  # noqa: S608
    rows = db.conn.execute(sql).fetchall()
    usable = _vectors_of_common_size({i: v for i, _, v, _ in rows})
    bad, unchecked = [], 0
    for i, hash_, vec, digest in rows:
        if digest is None:
            unchecked += 1
        fine = (
            i in usable
            and np.isfinite(usable[i]).all()
            and len(hash_) == len(text_hash(""))
            and (digest is None or digest == vector_digest(hash_, vec))
        )
        if not fine:
            bad.append(i)
    return bad, unchecked


def _damaged_children(db: Database, docstore: SQLiteDocStore, bad: set[int]) -> list[str]:
    """Children whose vector is absent or in ``bad``, or whose vector's hash is not their text's."""
    sql = "SELECT c.key, c.vec, v.hash FROM children c LEFT JOIN vectors v ON v.id = c.vec"
    rows = db.conn.execute(sql).fetchall()
    damaged = [key for key, vec, hash_ in rows if hash_ is None or vec in bad]
    sound = [(key, hash_) for key, vec, hash_ in rows if hash_ is not None and vec not in bad]
    for part in chunks(sound):
        docs = docstore.mget([key for key, _ in part])
        for (key, hash_), doc in zip(part, docs, strict=True):
            if (
                doc is not None
                and text_hash(embedded_text(doc.page_content, doc.metadata)) != hash_
            ):
                damaged.append(key)
    return sorted(damaged)


def readable_rows(db: Database, sql: str) -> tuple[list[tuple[Any, ...]], bool]:
    """The rows of ``sql`` that can be read from a damaged file, and whether all could."""
    rows: list[tuple[Any, ...]] = []
    try:
        for row in db.conn.execute(sql):
            rows.append(tuple(row))
    except sqlite3.DatabaseError:
        return rows, False
    return rows, True


def salvage_vectors(db: Database) -> list[tuple[bytes, bytes]]:
    """``(hash, vector bytes)`` of the vectors a damaged file still holds whole (digest checked)."""
    digests = db.has_vector_digests()
    sql = f"SELECT hash, vec, {'digest' if digests else 'NULL'} FROM vectors"  # noqa: S608
    rows, whole = readable_rows(db, sql)
    if not whole:  # a damaged page: read the others one row at a time
        rows = _rows_one_by_one(db, sql)
    rows = [(h, v, d) for h, v, d in rows if isinstance(h, bytes) and isinstance(v, bytes)]
    usable = _vectors_of_common_size({i: bytes(v) for i, (_, v, _) in enumerate(rows)})
    return [
        (bytes(h), bytes(v))
        for i, (h, v, d) in enumerate(rows)
        if i in usable
        and np.isfinite(usable[i]).all()
        and len(h) == len(text_hash(""))
        and (d is None or d == vector_digest(h, v))
    ]


def _rows_one_by_one(db: Database, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (over ``vectors``) read by id, skipping those that fail."""
    try:
        last = db.conn.execute("SELECT max(id) FROM vectors").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        return []
    rows = []
    for i in range(1, int(last) + 1):
        with contextlib.suppress(sqlite3.DatabaseError):
            rows += db.conn.execute(f"{sql} WHERE id = ?", (i,)).fetchall()
    return rows


def mend(db: Database, damage: Damage) -> None:
    """Delete the damaged rows (their sources then have missing pieces: verify rebuilds them)."""
    with db.write() as conn:
        for part in chunks(damage.unreadable):
            for table in ("nodes", "docs"):
                conn.execute(f"DELETE FROM {table} WHERE key IN ({_marks(len(part))})", part)  # noqa: S608
        for part in chunks(damage.vectors):
            conn.execute(f"DELETE FROM vectors WHERE id IN ({_marks(len(part))})", part)  # noqa: S608
        for part in chunks(damage.children):
            where = f"IN ({_marks(len(part))})"
            rows = f"SELECT row FROM children WHERE key {where}"  # noqa: S608
            conn.execute(f"DELETE FROM {LEXICAL_TABLE} WHERE rowid IN ({rows})", part)  # noqa: S608
            conn.execute(f"DELETE FROM children WHERE key {where}", part)  # noqa: S608
