"""The command line's lexical index: SQLite FTS5 in the store's own database.

Each leaf the child index holds is a row of the FTS5 table ``lexical`` (its
``rowid`` is the leaf's row number, the FAISS id), written and removed by the
same statements that write and remove the leaf (:class:`~.sqlite.SQLiteRows`),
so it commits or rolls back with the nodes and vectors. Nothing is built when
a command opens the store: a search reads the table.

**One analyser.** A leaf's terms are what :func:`~.lexical_index.analyze`
makes of its text (the analyser of every store), stored separated by spaces
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
leaves, not to the store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.store.database import LEXICAL_TABLE, Database, chunks, marks
from langchain_s2b.store.lexical_index import analyze, query_terms, source_of

_SEARCH = f"""
SELECT key, -bm25({LEXICAL_TABLE}) AS score FROM {LEXICAL_TABLE}
WHERE {LEXICAL_TABLE} MATCH ? {{where}} ORDER BY bm25({LEXICAL_TABLE}), key LIMIT ?
"""  # noqa: S608 -- the table name is ours


def terms_of(text: str) -> str:
    """A leaf's terms as the ``terms`` column holds them."""
    return " ".join(analyze(text))


def match_expression(query: str) -> str | None:
    """The FTS5 ``MATCH`` expression of a query: its analysed terms, quoted, OR'ed."""
    terms = query_terms(query)
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


class SQLiteLexical:
    """Search, list and rebuild the FTS5 table; writes come through :meth:`add` and :meth:`remove`.

    Args:
        db: the store's database.
        sources_for: the source keys a metadata-dict filter selects (``None``:
            the filter names a per-leaf field, or is a callable).
        metadata_of: each leaf's metadata by key (a filter the source keys can
            not decide is evaluated on it).
    """

    def __init__(
        self,
        db: Database,
        sources_for: Callable[[Any], set[str] | None],
        metadata_of: Callable[[list[str]], list[dict[str, Any] | None]],
    ) -> None:
        self.db = db
        self._sources_for = sources_for
        self._metadata_of = metadata_of

    # Writes (inside the caller's transaction) -----------------------------------

    def add(
        self,
        conn: sqlite3.Connection,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
    ) -> None:
        """Index leaves under their row numbers."""
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
        expression = match_expression(query)
        if expression is None or n < 1:
            return []
        if flt is None:
            return self._search(expression, n, "", [])
        sources = self._sources_for(flt)
        if sources is not None:
            if not sources:
                return []
            where = "AND source IN (SELECT value FROM json_each(?))"
            return self._search(expression, n, where, [json.dumps(sorted(sources))])
        depth = n
        while True:  # a filter on per-leaf fields: deeper until n pass or no more match
            found = self._search(expression, depth, "", [])
            metas = self._metadata_of([key for key, _ in found])
            kept = [
                pair for pair, meta in zip(found, metas, strict=True)
                if meta is not None and matches_filter(meta, flt)
            ]  # fmt: skip
            if len(kept) >= n or len(found) < depth:
                return kept[:n]
            depth *= 2

    def _search(
        self, expression: str, n: int, where: str, args: list[Any]
    ) -> list[tuple[str, float]]:
        sql = _SEARCH.format(where=where)
        with self.db.read() as conn:
            rows = conn.execute(sql, [expression, *args, n]).fetchall()
        return [(str(key), float(score)) for key, score in rows]

    def lexical_keys(self) -> set[str]:
        """Every key the table holds (for ``verify``)."""
        with self.db.read() as conn:
            return {str(row[0]) for row in conn.execute(f"SELECT key FROM {LEXICAL_TABLE}")}  # noqa: S608

    def rebuild_lexical(self, docstore: BaseStore[str, Document]) -> None:
        """Write the table again from the leaves the child index holds and their text."""
        with self.db.write() as conn:
            self.clear(conn)
            pairs = conn.execute("SELECT row, key FROM children ORDER BY row").fetchall()
            for part in chunks(pairs, 1000):
                docs = docstore.mget([key for _, key in part])
                found = [(r, k, d) for (r, k), d in zip(part, docs, strict=True) if d is not None]
                self.add(
                    conn,
                    [r for r, _, _ in found],
                    [k for _, k, _ in found],
                    [d.page_content for _, _, d in found],
                )
