"""The lexical index of a ``PGVector`` child store: PostgreSQL's full-text search, same database.

Every leaf is a row of ``s2b_lexical`` beside langchain-postgres's own tables:
its collection, key, source key, text, metadata and a ``tsvector`` of its
terms. The terms are what :func:`~langchain_s2b.store.lexical.analyzer.analyze`
makes of the text, each written as ``x`` and its UTF-8 bytes in hex, so that
PostgreSQL's ``simple`` configuration (which would otherwise split and fold
words its own way) keeps them exactly: text and queries are analysed by the
same analyser in every store (a leaf's terms are those of its text with its header and
context, :func:`~langchain_s2b.core.headers.embedded_text`; ``body`` keeps its text). A
query is its terms OR'ed, ranked by
``ts_rank`` (PostgreSQL's own ranking, not BM25; fused by z-scores like any
lexical list). Since the rows live in the database, every process that opens
the collection finds them: nothing is built from this process's writes only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.stored import Entry
from langchain_s2b.store.lexical.analyzer import analyze, query_terms, source_of

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS s2b_lexical (collection text NOT NULL, key text NOT NULL, "
    "source text NOT NULL, terms tsvector NOT NULL, body text NOT NULL, meta jsonb NOT NULL, "
    "PRIMARY KEY (collection, key))",
    "CREATE INDEX IF NOT EXISTS s2b_lexical_terms ON s2b_lexical USING gin (terms)",
)
_SEARCH = (
    "SELECT key, ts_rank(terms, query) AS rank, meta FROM s2b_lexical, "
    "to_tsquery('simple', :q) query WHERE collection = :c AND terms @@ query "
    "ORDER BY rank DESC, key LIMIT :n"
)
_SEARCH_IN_SOURCES = (
    "SELECT key, ts_rank(terms, query) AS rank, meta FROM s2b_lexical, "
    "to_tsquery('simple', :q) query WHERE collection = :c AND terms @@ query "
    "AND source = ANY(:sources) ORDER BY rank DESC, key LIMIT :n"
)


def hex_terms(terms: Sequence[str]) -> str:
    """Terms as ``simple`` tokens PostgreSQL keeps as they are (``x`` + UTF-8 hex)."""
    return " ".join("x" + term.encode("utf-8", "surrogatepass").hex() for term in terms)


def is_pgvector(store: Any) -> bool:
    """Whether ``store`` is langchain-postgres's ``PGVector`` (imported only if installed)."""
    try:
        from langchain_postgres import PGVector
    except ImportError:
        return False
    return isinstance(store, PGVector)


class PgLexical:
    """Full-text search over one ``PGVector`` collection's leaves, in its database."""

    def __init__(self, store: Any) -> None:
        from sqlalchemy import create_engine

        engine = getattr(store, "_engine", None)
        if engine is None:  # an async PGVector: the same database through psycopg's sync side
            url = store._async_engine.url
            if url.drivername != "postgresql+psycopg":
                url = url.set(drivername="postgresql+psycopg")
            engine = create_engine(url)
        self._engine = engine
        self._collection = str(store.collection_name)
        with self._engine.begin() as conn:
            for statement in _SCHEMA:
                conn.exec_driver_sql(statement)

    def _run(self, sql: str, params: dict[str, Any] | list[dict[str, Any]]) -> list[Any]:
        from sqlalchemy import text

        with self._engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return list(result) if result.returns_rows else []

    # Writing ----------------------------------------------------------------------

    def add(self, entries: Sequence[Entry]) -> None:
        """Index leaves under their keys (a key already present is replaced); one transaction."""
        if not entries:
            return
        rows = [
            {
                "c": self._collection,
                "k": key,
                "s": source_of(key),
                "t": hex_terms(analyze(embedded_text(text, meta))),
                "b": text,
                "m": json.dumps(meta, ensure_ascii=False, default=str),
            }
            for key, text, meta in entries
        ]
        self._run(
            "INSERT INTO s2b_lexical (collection, key, source, terms, body, meta) "
            "VALUES (:c, :k, :s, to_tsvector('simple', :t), :b, CAST(:m AS jsonb)) "
            "ON CONFLICT (collection, key) DO UPDATE SET source = EXCLUDED.source, "
            "terms = EXCLUDED.terms, body = EXCLUDED.body, meta = EXCLUDED.meta",
            rows,
        )

    def delete(self, keys: Sequence[str]) -> None:
        """Remove leaves by key, in one transaction; keys it does not hold are ignored."""
        if keys:
            self._run(
                "DELETE FROM s2b_lexical WHERE collection = :c AND key = ANY(:keys)",
                {"c": self._collection, "keys": list(keys)},
            )

    # Reading ----------------------------------------------------------------------

    def search(
        self,
        query: str,
        n: int,
        *,
        sources: Collection[str] | None = None,
        keep: Callable[[str, dict[str, Any]], bool] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``n`` best leaves as ``(key, rank)``, best first (ties by key).

        As :meth:`~langchain_s2b.store.lexical.lexical_index.LexicalIndex.search`.
        """
        terms = query_terms(query)
        if not terms or n < 1 or (sources is not None and not sources):
            return []
        params: dict[str, Any] = {"c": self._collection, "q": " | ".join(hex_terms(terms).split())}
        sql = _SEARCH
        if sources is not None:
            sql, params["sources"] = _SEARCH_IN_SOURCES, sorted(sources)
        depth = n
        while True:
            found = self._run(sql, {**params, "n": depth})
            pairs = [
                (str(key), float(rank))
                for key, rank, meta in found
                if keep is None or keep(str(key), meta)
            ]
            if len(pairs) >= n or len(found) < depth:
                return pairs[:n]
            depth *= 2

    def entries(self, keys: Collection[str] | None = None) -> list[Entry]:
        """Every ``(key, text, metadata)`` held (of ``keys``, if given), by key."""
        if keys is None:
            found = self._run(
                "SELECT key, body, meta FROM s2b_lexical WHERE collection = :c ORDER BY key",
                {"c": self._collection},
            )
        else:
            found = self._run(
                "SELECT key, body, meta FROM s2b_lexical WHERE collection = :c "
                "AND key = ANY(:keys) ORDER BY key",
                {"c": self._collection, "keys": sorted(keys)},
            )
        return [(str(key), str(body), dict(meta)) for key, body, meta in found]

    def items(self) -> list[tuple[str, str]]:
        """Every ``(key, text)`` held, by key."""
        return [(key, text) for key, text, _ in self.entries()]

    def keys(self) -> set[str]:
        """Every key held."""
        found = self._run(
            "SELECT key FROM s2b_lexical WHERE collection = :c", {"c": self._collection}
        )
        return {str(key) for (key,) in found}

    def __len__(self) -> int:
        found = self._run(
            "SELECT count(*) FROM s2b_lexical WHERE collection = :c", {"c": self._collection}
        )
        return int(found[0][0])
