"""The command line's one-file database: nodes, vectors, FTS5 and the FAISS file of a commit.

It owns the SQLite database (tables, transactions, the commit counter:
``database``, sqlite3 only), its docstore, vectors by content hash,
``SQLiteFaissIndex`` (records in SQLite, FAISS in a file named after the commit),
the FAISS file's record and checks (``index_file``), its FTS5 lexical index and
the damage checks and mending (``find_damage``, ``mend``). It imports
:mod:`langchain_s2b.store.base`, :mod:`langchain_s2b.store.lexical` and
:mod:`langchain_s2b.store.vectors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.sqlite.cached_embeddings import CachedEmbeddings, text_hash
    from langchain_s2b.store.sqlite.context_cache import SQLiteContextCache
    from langchain_s2b.store.sqlite.damage import (
        Damage,
        file_damage,
        find_damage,
        mend,
        readable_rows,
        salvage_vectors,
    )
    from langchain_s2b.store.sqlite.database import (
        SCHEMA_VERSION,
        Database,
        dangling_children,
        upgrade,
        vector_digest,
    )
    from langchain_s2b.store.sqlite.docstore import SQLiteDocStore
    from langchain_s2b.store.sqlite.rows import SQLiteRows
    from langchain_s2b.store.sqlite.sqlite_faiss import SQLiteFaissIndex
    from langchain_s2b.store.sqlite.sqlite_lexical import SQLiteLexical

__all__ = [
    "CachedEmbeddings",
    "Damage",
    "Database",
    "SCHEMA_VERSION",
    "SQLiteContextCache",
    "SQLiteDocStore",
    "SQLiteFaissIndex",
    "SQLiteLexical",
    "SQLiteRows",
    "dangling_children",
    "file_damage",
    "find_damage",
    "mend",
    "readable_rows",
    "salvage_vectors",
    "text_hash",
    "upgrade",
    "vector_digest",
]

_HOMES = {
    "SCHEMA_VERSION": "langchain_s2b.store.sqlite.database",
    "Database": "langchain_s2b.store.sqlite.database",
    "dangling_children": "langchain_s2b.store.sqlite.database",
    "upgrade": "langchain_s2b.store.sqlite.database",
    "vector_digest": "langchain_s2b.store.sqlite.database",
    "CachedEmbeddings": "langchain_s2b.store.sqlite.cached_embeddings",
    "text_hash": "langchain_s2b.store.sqlite.cached_embeddings",
    "SQLiteContextCache": "langchain_s2b.store.sqlite.context_cache",
    "Damage": "langchain_s2b.store.sqlite.damage",
    "file_damage": "langchain_s2b.store.sqlite.damage",
    "find_damage": "langchain_s2b.store.sqlite.damage",
    "mend": "langchain_s2b.store.sqlite.damage",
    "readable_rows": "langchain_s2b.store.sqlite.damage",
    "salvage_vectors": "langchain_s2b.store.sqlite.damage",
    "SQLiteDocStore": "langchain_s2b.store.sqlite.docstore",
    "SQLiteRows": "langchain_s2b.store.sqlite.rows",
    "SQLiteFaissIndex": "langchain_s2b.store.sqlite.sqlite_faiss",
    "SQLiteLexical": "langchain_s2b.store.sqlite.sqlite_lexical",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
