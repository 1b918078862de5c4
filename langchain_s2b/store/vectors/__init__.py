"""The vector index: ``FaissIndex``, its rows' records as columns, and its saved files.

It owns the FAISS index (add, delete, undo, compact, mend, search, filters),
the records of its rows (``records``) and the files a save writes and a load
checks. It imports :mod:`langchain_s2b.store.base` and
:mod:`langchain_s2b.store.lexical` (a ``FaissIndex`` keeps its own BM25 index).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_s2b.store.vectors.faiss_base import normalise
    from langchain_s2b.store.vectors.faiss_files import (
        LEGACY_RECORDS_FILE,
        SAVED_FILES,
        read_faiss_file,
    )
    from langchain_s2b.store.vectors.faiss_index import FaissIndex

__all__ = ["FaissIndex", "LEGACY_RECORDS_FILE", "SAVED_FILES", "normalise", "read_faiss_file"]

_HOMES = {
    "normalise": "langchain_s2b.store.vectors.faiss_base",
    "LEGACY_RECORDS_FILE": "langchain_s2b.store.vectors.faiss_files",
    "SAVED_FILES": "langchain_s2b.store.vectors.faiss_files",
    "read_faiss_file": "langchain_s2b.store.vectors.faiss_files",
    "FaissIndex": "langchain_s2b.store.vectors.faiss_index",
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
