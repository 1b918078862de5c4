"""The command line's lexical index: SQLite FTS5 in the store's own database.

Each leaf the child index holds is a row of the FTS5 table ``lexical`` (its
``rowid`` is the leaf's row number, the FAISS id), written and removed by the
same statements that write and remove the leaf (:class:`~.sqlite.SQLiteRows`),
so it commits or rolls back with the nodes and vectors. Nothing is built when
a command opens the store: a search reads the table.

**One analyser.** A leaf's terms are what :func:`~langchain_s2b.store.lexical.analyze`
makes of its text with its header and context
(:func:`~langchain_s2b.core.headers.embedded_text`; the analyser of every
store), stored separated by spaces
in a table whose tokenizer is FTS5's ``ascii``: it splits on ASCII characters
that are not letters or digits and keeps every other character inside its
token, and an analysed term holds no ASCII character but lower-case letters
and digits, so FTS5 indexes exactly the analyser's terms (a test compares
FTS5's own vocabulary, ``fts5vocab``, with them on text in eight scripts). A
query is analysed the same way and its terms are OR'ed, each quoted.

**Ranking.** ``bm25()`` with FTS5's defaults (k1 = 1.2, b = 0.75), best
first, ties by key. FTS5's idf is ``log((N - n + 0.5) / (n + 0.5))`` and a term
in more than half of the leaves gets 1e-6; tantivy's (the Python API's lexical
index) is ``log(1 + (N - n + 0.5) / (n + 0.5))``. So the two agree on a
query of one term (the idf is a common factor, and fusion's z-scores remove
it) and weigh the terms of a longer query a little differently; the very
common ones (``the``) count for nothing here. FTS5 scores every leaf that
holds a query term before it sorts, so a search costs in proportion to those
leaves, not to the store. A term in half of the leaves or more adds at most
2.2e-6 to a score, so it is left out of the search when another term remains
(and put back when fewer than ``n`` leaves match the others): the ranking is
the same up to score differences below 1e-5, and a search no longer scores
most of the store for ``the`` or ``of``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.core.headers import embedded_text
from langchain_s2b.store.lexical import analyze, query_terms, source_of
from langchain_s2b.store.sqlite.database import LEXICAL_TABLE, Database, chunks, marks

_VOCAB = "lexical_vocab"
"""The table's own vocabulary (``fts5vocab``): each term's number of leaves."""
_SEARCH = f"""
SELECT key, -bm25({LEXICAL_TABLE}) AS score FROM {LEXICAL_TABLE}
WHERE {LEXICAL_TABLE} MATCH ? {{where}} ORDER BY bm25({LEXICAL_TABLE}), key LIMIT ?
"""  # noqa: S608 -- the table name is ours


def terms_of(text: str) -> str:
    """A leaf's terms as the ``terms`` column holds them."""
    return " ".join(analyze(text))


def match_expression(terms: Sequence[str]) -> str | None:
    """The FTS5 ``MATCH`` expression of analysed terms: each quoted, OR'ed."""
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """An SQLite varint at ``data[at:]``: ``(value, next position)``."""
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return value, at + 9


class SQLiteLexical:
    """Search, list and rebuild the FTS5 table; writes come through :meth:`add` and :meth:`remove`.

    Args:
        db: the store's database.
        sources_for: the source keys a metadata-dict filter selects (``None``:
            the filter names a per-leaf field, or is a callable).
        documents_of: each leaf's document by key, from the docstore (a filter the
            source keys can not decide is evaluated on its metadata; a rebuild
            reads its text).
    """

    def __init__(
        self,
        db: Database,
        sources_for: Callable[[Any], set[str] | None],
        documents_of: Callable[[list[str]], list[Document | None]],
    ) -> None:
        self.db = db
        self._sources_for = sources_for
        self._documents_of = documents_of

    def _metadata_of(self, keys: list[str]) -> list[dict[str, Any] | None]:
        return [None if doc is None else doc.metadata for doc in self._documents_of(keys)]

    # Writes (inside the caller's transaction) -----------------------------------

    def add(
        self,
        conn: sqlite3.Connection,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
    ) -> None:
        """Index leaves under their row numbers (``texts``: what is indexed, header included)."""
        conn.executemany(
            f"INSERT INTO {LEXICAL_TABLE} (rowid, terms, key, source) VALUES (?, ?, ?, ?)",  # noqa: S608
            [
                (row, terms_of(text), key, source_of(key))
                for row, key, text in zip(rows, keys, texts, strict=True)
            ],
        )

    def remove(self, conn: sqlite3.Connection, rows: Sequence[int]) -> None:
        """Remove leaves by row number."""
        for part in chunks(list(rows)):
            conn.execute(f"DELETE FROM {LEXICAL_TABLE} WHERE rowid IN ({marks(len(part))})", part)  # noqa: S608

    def clear(self, conn: sqlite3.Connection) -> None:
        """Remove every leaf."""
        conn.execute(f"DELETE FROM {LEXICAL_TABLE}")  # noqa: S608

    # The backend of the hybrid child index -------------------------------------

    def search_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 that pass ``flt`` (selected before ranking)."""
        check_filter(flt)
        terms = query_terms(query)
        if not terms or n < 1:
            return []
        if flt is None:
            return self._search(terms, n, "", [])
        sources = self._sources_for(flt)
        if sources is not None:
            if not sources:
                return []
            where = "AND source IN (SELECT value FROM json_each(?))"
            return self._search(terms, n, where, [json.dumps(sorted(sources))])
        depth = n
        while True:  # a filter on per-leaf fields: deeper until n pass or no more match
            found = self._search(terms, depth, "", [])
            metas = self._metadata_of([key for key, _ in found])
            kept = [
                pair for pair, meta in zip(found, metas, strict=True)
                if meta is not None and matches_filter(meta, flt)
            ]  # fmt: skip
            if len(kept) >= n or len(found) < depth:
                return kept[:n]
            depth *= 2

    def _search(
        self, terms: list[str], n: int, where: str, args: list[Any]
    ) -> list[tuple[str, float]]:
        sql = _SEARCH.format(where=where)
        with self.db.read() as conn:
            rare = self._rare(conn, terms)
            rows = conn.execute(sql, [match_expression(rare), *args, n]).fetchall()
            if len(rows) < n and len(rare) < len(terms):
                rows = conn.execute(sql, [match_expression(terms), *args, n]).fetchall()
        return [(str(key), float(score)) for key, score in rows]

    def _rare(self, conn: sqlite3.Connection, terms: list[str]) -> list[str]:
        """The terms in fewer than half of the leaves (all of them if none is)."""
        leaves = self._leaves(conn)
        if leaves is None:
            return terms
        vocabulary = f"fts5vocab(main, {LEXICAL_TABLE}, 'row')"
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB} USING {vocabulary}")
        sql = f"SELECT term, doc FROM temp.{_VOCAB} WHERE term IN ({marks(len(terms))})"  # noqa: S608
        found = dict(conn.execute(sql, terms).fetchall())
        rare = [term for term in terms if 2 * int(found.get(term, 0)) < leaves]
        return rare or terms

    @staticmethod
    def _leaves(conn: sqlite3.Connection) -> int | None:
        """The rows FTS5 counts (its averages record), ``None`` if it can not be read."""
        try:
            row = conn.execute(f"SELECT block FROM {LEXICAL_TABLE}_data WHERE id = 1").fetchone()  # noqa: S608
            return None if row is None else _varint(bytes(row[0]), 0)[0]
        except (sqlite3.Error, IndexError, TypeError):
            return None

    def lexical_keys(self) -> set[str]:
        """Every key the table holds (for ``verify``)."""
        with self.db.read() as conn:
            return {str(row[0]) for row in conn.execute(f"SELECT key FROM {LEXICAL_TABLE}")}  # noqa: S608

    def rebuild_lexical(self) -> None:
        """Write the table again from the leaves the child index holds and their text."""
        with self.db.write() as conn:
            self.clear(conn)
            pairs = conn.execute("SELECT row, key FROM children ORDER BY row").fetchall()
            for part in chunks(pairs, 1000):
                docs = self._documents_of([key for _, key in part])
                found = [(r, k, d) for (r, k), d in zip(part, docs, strict=True) if d is not None]
                self.add(
                    conn,
                    [r for r, _, _ in found],
                    [k for _, k, _ in found],
                    [embedded_text(d.page_content, d.metadata) for _, _, d in found],
                )
