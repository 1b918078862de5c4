"""The child index: the adapter over any child ``VectorStore`` and its hybrid join with BM25.

It owns ``ChildIndex`` (embed, search for hits, add, delete, list; the FAISS
fast path) and ``DenseChildIndex``/``HybridChildIndex`` (the lexical part of the
child index, written in one commit with the vectors). It imports
:mod:`langchain_s2b.store.base`, :mod:`langchain_s2b.store.lexical` and
:mod:`langchain_s2b.store.vectors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.children.child_index import ChildIndex
    from langchain_s2b.store.children.hybrid_index import DenseChildIndex, HybridChildIndex

__all__ = ["ChildIndex", "DenseChildIndex", "HybridChildIndex"]

_HOMES = {
    "ChildIndex": "langchain_s2b.store.children.child_index",
    "DenseChildIndex": "langchain_s2b.store.children.hybrid_index",
    "HybridChildIndex": "langchain_s2b.store.children.hybrid_index",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
