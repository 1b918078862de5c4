"""What every part of ``ChildIndex`` shares: the store, its model, how it takes vectors, filters."""

from __future__ import annotations

import inspect
import itertools
import struct
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.store.vectors import FaissIndex

Vectors = list[list[float]] | None


class ChildBase:
    """The store a :class:`~langchain_s2b.store.children.child_index.ChildIndex` adapts."""

    def __init__(self, vectorstore: VectorStore) -> None:
        self.vectorstore = vectorstore
        self.faiss = vectorstore if isinstance(vectorstore, FaissIndex) else None

    @property
    def embeddings(self) -> Embeddings | None:
        """The store's embedding model, when it exposes one."""
        try:
            return self.vectorstore.embeddings
        except (AttributeError, NotImplementedError):
            return None

    def _takes_vectors(self) -> bool:
        """Whether leaves can be added with vectors embedded beforehand.

        Not when the store reads its leaves' vectors itself as it adds them
        (``embeds_on_add``: the command line's store, whose vectors are in its
        database by then), so that no call holds every leaf's vector at once.
        """
        if getattr(self.vectorstore, "embeds_on_add", False):
            return False
        return self.faiss is not None or _embeddings_call(self.vectorstore, "add_embeddings") != ""


def _float_lists(vectors: list[list[float]], n: int, dim: int) -> np.ndarray:
    """Rows of Python floats (LangChain's interface) as one float32 matrix.

    ``struct`` packs a row of floats as C floats (the same cast as numpy's,
    ``inf`` past the float32 range) ~2.5x faster than numpy reads them one by
    one; anything it will not pack (a number as a string) goes through numpy.
    """
    pack = struct.Struct(f"{dim}f").pack
    try:
        packed = bytearray().join([pack(*row) for row in vectors])  # writable
    except struct.error:
        flat = itertools.chain.from_iterable(vectors)
        return np.fromiter(flat, dtype=np.float32, count=n * dim).reshape(n, dim)
    return np.frombuffer(packed, dtype=np.float32).reshape(n, dim)


def _embeddings_call(store: Any, name: str) -> str:
    """How a store's ``add_embeddings``-style method takes vectors, or ``""`` if it has none.

    The method is not part of LangChain's ``VectorStore`` interface and comes in
    two shapes: ``(text_embeddings, metadatas, ids)`` of ``(text, vector)`` pairs
    (``langchain_community`` FAISS) and ``(texts, embeddings, metadatas, ids)``
    (``PGVector`` and others). Any other shape is not used.
    """
    method = getattr(store, name, None)
    if not callable(method):
        return ""
    try:
        params = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return ""
    if params[:1] == ["text_embeddings"]:
        return "pairs"
    if params[:2] == ["texts", "embeddings"]:
        return "columns"
    return ""


def _listable(store: Any) -> set[str] | None:
    """Every key of a store that can be listed in memory, else ``None``."""
    if isinstance(store, FaissIndex):
        return set(store.keys())
    mapping = getattr(store, "index_to_docstore_id", None)
    if isinstance(mapping, dict):
        return set(mapping.values())
    docs = getattr(store, "store", None)
    if isinstance(docs, dict):
        return set(docs)
    return None


def native_filter(store: Any, flt: Any) -> dict[str, Any]:
    """``filter=`` (a Mongo-style metadata dict, or a callable on metadata) for ``store``.

    ``InMemoryVectorStore`` filters ``Document`` objects with a callable, and
    ``langchain_community``'s ``FAISS`` filters inside its own ``fetch_k``, so
    both get a callable and FAISS a ``fetch_k`` that covers the whole index.
    Any other store gets the dict as its own filter (``PGVector`` and most
    server stores read Mongo-style dicts); a callable is refused there.
    """
    check_filter(flt)
    on_meta = flt if callable(flt) else (lambda meta: matches_filter(meta, flt))
    if isinstance(store, InMemoryVectorStore):
        return {"filter": lambda doc: bool(on_meta(doc.metadata))}
    ntotal = getattr(getattr(store, "index", None), "ntotal", None)
    if isinstance(getattr(store, "index_to_docstore_id", None), dict) and ntotal is not None:
        return {"filter": on_meta, "fetch_k": max(int(ntotal), 1)}
    if callable(flt):
        msg = (
            f"A callable filter works only with FaissIndex, InMemoryVectorStore and "
            f"langchain_community's FAISS; {type(store).__name__} takes a metadata dict."
        )
        raise ValueError(msg)
    return {"filter": flt}
