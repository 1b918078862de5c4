"""The child index's records in the database: the ``children`` table (and its terms)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.keys import is_proxy_key
from langchain_s2b.store.sqlite.cached_embeddings import text_hash
from langchain_s2b.store.sqlite.database import PROXIES_TABLE, Database, chunks, marks
from langchain_s2b.store.sqlite.docstore import _UNREADABLE, SQLiteDocStore, _dec
from langchain_s2b.store.sqlite.sqlite_lexical import SQLiteLexical

__all__ = ["SQLiteRows"]

_marks = marks


class SQLiteRows:
    """The child index's records in the database: each leaf a ``children`` row (and its terms).

    The counterpart of :class:`~langchain_s2b.store.vectors.records.Records` for
    :class:`SQLiteFaissIndex`: a leaf's row number is its FAISS id, its key and
    vector are a ``children`` row, its text and metadata are its node in the
    docstore (read when asked for), and its terms a row of the lexical table.
    Writes join the caller's transaction: a leaf, its vector and its terms are
    committed together.
    """

    def __init__(
        self, db: Database, docstore: SQLiteDocStore, lexical: SQLiteLexical | None
    ) -> None:
        self.db = db
        self.docstore = docstore
        self.lexical = lexical
        self.released: set[int] = set()
        """Vector ids of removed leaves (candidates for ``collect_garbage``)."""

    def __len__(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM children").fetchone()[0])

    # Writing ----------------------------------------------------------------------

    def add(
        self,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
        metas: Sequence[Any],
    ) -> None:
        """Add leaves whose vectors are stored (by the hash of what is embedded for them)."""
        if not rows:
            return
        embedded = [embedded_text(t, m) for t, m in zip(texts, metas, strict=True)]
        hashes = [text_hash(t) for t in embedded]
        with self.db.write() as conn:
            known = _vector_ids(conn, hashes)
            missing = [k for k, h in zip(keys, hashes, strict=True) if h not in known]
            if missing:
                msg = f"No stored vector for the text of {missing[0]!r}; embed it first."
                raise ValueError(msg)
            conn.executemany(
                "INSERT INTO children (row, key, vec) VALUES (?, ?, ?)",
                [(r, k, known[h]) for r, k, h in zip(rows, keys, hashes, strict=True)],
            )
            proxies = [
                (k, t, json.dumps(m, separators=(",", ":")))
                for k, t, m in zip(keys, texts, metas, strict=True)
                if is_proxy_key(k)
            ]
            if proxies:  # a proxy's text and metadata: no docstore node holds them
                conn.execute(PROXIES_TABLE)
                conn.executemany(
                    "INSERT OR REPLACE INTO proxies (key, text, meta) VALUES (?, ?, ?)", proxies
                )
            if self.lexical is not None:
                self.lexical.add(conn, rows, keys, embedded)

    def remove(self, rows: Sequence[int]) -> None:
        """Remove leaves by row."""
        with self.db.write() as conn:
            for part in chunks(list(rows)):
                where = f"WHERE row IN ({_marks(len(part))})"
                found = conn.execute(f"SELECT vec FROM children {where}", part).fetchall()  # noqa: S608
                self.released.update(r[0] for r in found)
                keys = conn.execute(f"SELECT key FROM children {where}", part).fetchall()  # noqa: S608
                proxies = [key for (key,) in keys if is_proxy_key(key)]
                if proxies:  # written with their table
                    sql = f"DELETE FROM proxies WHERE key IN ({_marks(len(proxies))})"  # noqa: S608
                    conn.execute(sql, proxies)
                conn.execute(f"DELETE FROM children {where}", part)  # noqa: S608
            if self.lexical is not None:
                self.lexical.remove(conn, rows)

    def clear(self) -> None:
        """Remove every leaf."""
        with self.db.write() as conn:
            self.released.update(r[0] for r in conn.execute("SELECT vec FROM children"))
            conn.execute("DELETE FROM children")
            conn.execute("DROP TABLE IF EXISTS proxies")
            if self.lexical is not None:
                self.lexical.clear(conn)

    # Reading ----------------------------------------------------------------------

    def row(self, key: str) -> int:
        """The row of ``key`` (``-1``: not held)."""
        found = self.db.conn.execute("SELECT row FROM children WHERE key = ?", (key,)).fetchone()
        return -1 if found is None else int(found[0])

    def key(self, row: int) -> str | None:
        """The key of a row (``None``: not held)."""
        found = self.db.conn.execute("SELECT key FROM children WHERE row = ?", (row,)).fetchone()
        return None if found is None else str(found[0])

    def records(self, rows: Sequence[int]) -> list[tuple[str, str, dict[str, Any]] | None]:
        """``(key, text, metadata)`` per row (``None``: not held, or its node is gone)."""
        wanted = [r for r in dict.fromkeys(rows) if r >= 0]
        keys: dict[int, str] = {}
        with self.db.read() as conn:
            for part in chunks(wanted):
                sql = f"SELECT row, key FROM children WHERE row IN ({_marks(len(part))})"  # noqa: S608
                keys.update(conn.execute(sql, part).fetchall())
            names = [key for key in keys.values() if not is_proxy_key(key)]
            docs = dict(zip(names, self.docstore.mget(names), strict=True))
            proxies = [key for key in keys.values() if is_proxy_key(key)]
            for part in chunks(proxies):
                sql = f"SELECT key, text, meta FROM proxies WHERE key IN ({_marks(len(part))})"  # noqa: S608
                for key, text, meta in conn.execute(sql, part).fetchall():
                    docs[key] = Document(page_content=text, metadata=json.loads(meta), id=key)
        out: list[tuple[str, str, dict[str, Any]] | None] = []
        for row in rows:
            if row < 0:
                out.append(None)
                continue
            key = keys.get(row)
            doc = None if key is None else docs.get(key)
            if doc is None:  # FAISS holds it, so the database must: damage, never a hole
                what = f"row {row}" if key is None else repr(key)
                msg = f"Leaf {what} is in the child index but not in the docstore"
                raise MissingNodeError(msg)
            out.append((str(key), doc.page_content, doc.metadata))
        return out

    def record(self, row: int) -> tuple[str, str, dict[str, Any]] | None:
        """``(key, text, metadata)`` of a row."""
        return self.records([row])[0]

    def meta(self, row: int) -> dict[str, Any]:
        """The metadata of a row (``{}`` when its node is gone)."""
        found = self.record(row)
        return {} if found is None else found[2]

    def keys(self) -> list[str]:
        """Every key held."""
        return [str(r[0]) for r in self.db.conn.execute("SELECT key FROM children ORDER BY key")]

    def entries(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Every leaf's record, by row."""
        rows = self.live_rows().tolist()
        for part in chunks(rows, 1000):
            yield from filter(None, self.records(part))

    def live_rows(self) -> np.ndarray:
        """Every row, ascending."""
        rows = self.db.conn.execute("SELECT row FROM children ORDER BY row").fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def sources(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(source key, its document's metadata)`` per source (a filter on its fields)."""
        sql = "SELECT key, meta FROM docs WHERE key GLOB '*/doc/0'"
        for key, meta in self.db.conn.execute(sql).fetchall():
            try:
                found = json.loads(_dec(meta))["m"]
            except _UNREADABLE:
                continue
            if isinstance(found, dict):
                yield key.split("/", 1)[0], found

    def source_rows(self, source: str) -> np.ndarray:
        """The rows of one source's leaves."""
        sql = "SELECT row FROM children WHERE key >= ? AND key < ?"
        rows = self.db.conn.execute(sql, (f"{source}/", f"{source}0")).fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def unsourced(self) -> list[int]:
        """Rows whose metadata names no source: none here (every leaf has its source)."""
        return []

    def write(self, directory: Path, rows: np.ndarray | None = None) -> list[str]:
        """Not here: the database is the store's file (``save`` is for ``FaissIndex``)."""
        msg = "SQLiteFaissIndex keeps its rows in its database; it is not saved into a directory."
        raise ValueError(msg)


def _vector_ids(conn: sqlite3.Connection, hashes: Sequence[bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for part in chunks(list(dict.fromkeys(hashes))):
        sql = f"SELECT hash, id FROM vectors WHERE hash IN ({_marks(len(part))})"  # noqa: S608
        out.update(conn.execute(sql, part).fetchall())
    return out
