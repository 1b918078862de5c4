"""The lexical index: BM25 over the leaves' text, and the one analyser every engine shares.

It owns the analyser (``analyze``, ``query_terms``: :mod:`.analyzer`), the ``Lexical`` protocol,
``LexicalIndex`` (tantivy, with its files and their checks) and ``PgLexical``
(PostgreSQL full-text search beside a ``PGVector`` store). The command line's
FTS5 index lives with its database (:mod:`langchain_s2b.store.sqlite`); the
hybrid join of vectors and text lives in :mod:`langchain_s2b.store.children`.
It imports only :mod:`langchain_s2b.store.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.lexical.analyzer import analyze, query_terms, source_of
    from langchain_s2b.store.lexical.lexical_index import Lexical, LexicalIndex
    from langchain_s2b.store.lexical.pg_lexical import PgLexical, is_pgvector

__all__ = [
    "Lexical",
    "LexicalIndex",
    "PgLexical",
    "analyze",
    "is_pgvector",
    "query_terms",
    "source_of",
]

_HOMES = {
    "Lexical": "langchain_s2b.store.lexical.lexical_index",
    "LexicalIndex": "langchain_s2b.store.lexical.lexical_index",
    "analyze": "langchain_s2b.store.lexical.analyzer",
    "query_terms": "langchain_s2b.store.lexical.analyzer",
    "source_of": "langchain_s2b.store.lexical.analyzer",
    "PgLexical": "langchain_s2b.store.lexical.pg_lexical",
    "is_pgvector": "langchain_s2b.store.lexical.pg_lexical",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
