"""The vector index: ``FaissIndex``, its rows' records as columns, and its saved files.

It owns the FAISS index (add, delete, undo, compact, mend, search, filters),
the records of its rows (``records``) and the files a save writes and a load
checks. It imports :mod:`langchain_s2b.store.base` and
:mod:`langchain_s2b.store.lexical` (a ``FaissIndex`` keeps its own BM25 index).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.vectors.faiss_base import normalise
    from langchain_s2b.store.vectors.faiss_files import (
        LEGACY_RECORDS_FILE,
        SAVED_FILES,
        read_faiss_file,
    )
    from langchain_s2b.store.vectors.faiss_index import FaissIndex
    from langchain_s2b.store.vectors.faiss_lexical import Located
    from langchain_s2b.store.vectors.records import Place

__all__ = [
    "FaissIndex",
    "LEGACY_RECORDS_FILE",
    "Located",
    "Place",
    "SAVED_FILES",
    "normalise",
    "read_faiss_file",
]

_HOMES = {
    "normalise": "langchain_s2b.store.vectors.faiss_base",
    "LEGACY_RECORDS_FILE": "langchain_s2b.store.vectors.faiss_files",
    "SAVED_FILES": "langchain_s2b.store.vectors.faiss_files",
    "read_faiss_file": "langchain_s2b.store.vectors.faiss_files",
    "FaissIndex": "langchain_s2b.store.vectors.faiss_index",
    "Located": "langchain_s2b.store.vectors.faiss_lexical",
    "Place": "langchain_s2b.store.vectors.records",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
