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

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_s2b.store.sqlite.database import (
        SCHEMA_VERSION,
        Database,
        dangling_children,
        upgrade,
    )
    from langchain_s2b.store.sqlite.docstore import (
        CachedEmbeddings,
        Damage,
        SQLiteContextCache,
        SQLiteDocStore,
        SQLiteFaissIndex,
        file_damage,
        find_damage,
        mend,
        readable_rows,
        salvage_vectors,
        text_hash,
    )

__all__ = [
    "CachedEmbeddings",
    "Damage",
    "Database",
    "SCHEMA_VERSION",
    "SQLiteContextCache",
    "SQLiteDocStore",
    "SQLiteFaissIndex",
    "dangling_children",
    "file_damage",
    "find_damage",
    "mend",
    "readable_rows",
    "salvage_vectors",
    "text_hash",
    "upgrade",
]

_HOMES = {
    "SCHEMA_VERSION": "langchain_s2b.store.sqlite.database",
    "Database": "langchain_s2b.store.sqlite.database",
    "dangling_children": "langchain_s2b.store.sqlite.database",
    "upgrade": "langchain_s2b.store.sqlite.database",
    "CachedEmbeddings": "langchain_s2b.store.sqlite.docstore",
    "Damage": "langchain_s2b.store.sqlite.docstore",
    "SQLiteContextCache": "langchain_s2b.store.sqlite.docstore",
    "SQLiteDocStore": "langchain_s2b.store.sqlite.docstore",
    "SQLiteFaissIndex": "langchain_s2b.store.sqlite.docstore",
    "file_damage": "langchain_s2b.store.sqlite.docstore",
    "find_damage": "langchain_s2b.store.sqlite.docstore",
    "mend": "langchain_s2b.store.sqlite.docstore",
    "readable_rows": "langchain_s2b.store.sqlite.docstore",
    "salvage_vectors": "langchain_s2b.store.sqlite.docstore",
    "text_hash": "langchain_s2b.store.sqlite.docstore",
}
_ORIGINAL: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(home), _ORIGINAL.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
