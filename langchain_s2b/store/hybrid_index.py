"""The child index with its lexical part: one commit for the vectors and the text.

:class:`HybridChildIndex` is the :class:`~langchain_s2b.store.child_index.ChildIndex`
of a retriever with ``hybrid=True``. The lexical index is part of the child
index, and knows every leaf the store holds:

- ``FaissIndex`` keeps it itself (:meth:`FaissIndex.lexical`): built from its
  records on first use, then written and removed with every vector under its
  own lock, saved and loaded with it. Every retriever that shares one
  ``FaissIndex`` shares its lexical index.
- A child store that keeps a lexical index of its own, written in its own
  transactions, offers it as a :class:`LexicalBackend` (``lexical_backend()``;
  the command line's SQLite store: FTS5 in the same database). It is searched,
  listed and rebuilt through that backend, and nothing is built when it opens.
- Any other child store gets one built from the docstore's leaves when the
  retriever opens (every manifest's leaves), shared by every retriever of this
  process over the same store object, and written with the vectors. A
  docstore that can not list its keys can not be read that way:
  ``hybrid=True`` is then refused in one line.

Every write is one commit: vectors then text on add, text then vectors on
delete (the part that can be put back goes first), and the part already done is
undone when the other fails or is interrupted, before the error goes on up. So
the operation that asked (``lifecycle``) sees a write that happened whole or
not at all, and undoes it as it undoes any other.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Protocol

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.stores import BaseStore
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.core.ingest import leaf_keys
from langchain_s2b.core.keys import is_manifest_key
from langchain_s2b.store.child_index import ChildIndex
from langchain_s2b.store.lexical_index import Entry, LexicalIndex

_BATCH = 1000
_SHARED: weakref.WeakKeyDictionary[Any, LexicalIndex] = weakref.WeakKeyDictionary()
"""The lexical index of each child store object other than ``FaissIndex``, in this process."""


class LexicalBackend(Protocol):
    """A lexical index that its child store writes itself, in the same commit as the vectors."""

    def search_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 among those that pass ``flt`` (selected before ranking)."""

    def lexical_keys(self) -> set[str]:
        """Every leaf key it holds."""

    def rebuild_lexical(self, docstore: BaseStore[str, Document]) -> None:
        """Write it again from the leaves the child store holds."""


class HybridChildIndex(ChildIndex):
    """A child index whose leaves are also searchable by BM25, written in one commit.

    Args:
        vectorstore: the child store.
        docstore: the docstore (the leaves' text, for a store with no lexical index).
        lexical: the lexical index to use (default: the store's ``lexical_backend()``
            when it offers one, else ``FaissIndex``'s own, else one built here).
    """

    def __init__(
        self,
        vectorstore: VectorStore,
        docstore: BaseStore[str, Document],
        lexical: LexicalBackend | None = None,
    ) -> None:
        super().__init__(vectorstore)
        self._own: LexicalIndex | None = None
        offered = getattr(vectorstore, "lexical_backend", None)
        self.backend = lexical if lexical is not None or not callable(offered) else offered()
        if self.backend is not None:
            return
        if self.faiss is None:
            self._own = shared_lexical(vectorstore, docstore)
        else:  # built now (once per index), so that every write reaches it and save keeps it
            self.faiss.lexical()

    @property
    def lexical(self) -> LexicalIndex:
        """The lexical index of this child store (not one of a backend)."""
        if self.backend is not None:
            msg = f"This child index searches {type(self.backend).__name__}, not a LexicalIndex."
            raise TypeError(msg)
        if self.faiss is not None:
            return self.faiss.lexical()
        assert self._own is not None
        return self._own

    def add(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Index leaves (with their vectors, if given) and their text, in one commit."""
        super().add(leaves, vectors)  # FaissIndex writes its text itself
        if self._own is not None:
            try:
                self._own.add(_entries(leaves))
            except BaseException:
                super().delete([str(leaf.id) for leaf in leaves])
                raise

    async def aadd(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Async :meth:`add`."""
        await super().aadd(leaves, vectors)
        if self._own is not None:
            try:
                await run_in_executor(None, self._own.add, _entries(leaves))
            except BaseException:
                await super().adelete([str(leaf.id) for leaf in leaves])
                raise

    def delete(self, keys: list[str]) -> None:
        """Delete leaves from both parts, in one commit; keys they do not hold are ignored."""
        if self._own is None:
            super().delete(keys)  # FaissIndex removes its text itself
            return
        held = self._take_text(keys)
        try:
            super().delete(keys)
        except BaseException:
            self._own.add(held)
            raise

    async def adelete(self, keys: list[str]) -> None:
        """Async :meth:`delete`."""
        if self._own is None:
            await super().adelete(keys)
            return
        held = await run_in_executor(None, self._take_text, keys)
        try:
            await super().adelete(keys)
        except BaseException:
            await run_in_executor(None, self._own.add, held)
            raise

    def _take_text(self, keys: list[str]) -> list[Entry]:
        """Remove ``keys`` from the lexical index; what it held, to put back on a failure."""
        assert self._own is not None
        wanted = set(keys)
        held = [entry for entry in self._own.entries() if entry[0] in wanted]
        self._own.delete(keys)
        return held

    def search_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 among those that pass ``flt``."""
        if self.backend is not None:
            return self.backend.search_text(query, n, flt)
        if self.faiss is not None:
            return self.faiss.search_text(query, n, flt)
        check_filter(flt)
        if flt is None:
            return self.lexical.search(query, n)
        return self.lexical.search(query, n, keep=lambda _, meta: matches_filter(meta, flt))

    async def asearch_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """Async :meth:`search_text`."""
        return await run_in_executor(None, self.search_text, query, n, flt)

    def lexical_keys(self) -> set[str]:
        """Every leaf key the lexical index holds (for ``verify``)."""
        if self.backend is not None:
            return self.backend.lexical_keys()
        return self.lexical.keys()

    def rebuild_lexical(self, docstore: BaseStore[str, Document]) -> None:
        """Build the lexical index again from its source of truth (``verify(repair=True)``)."""
        if self.backend is not None:
            self.backend.rebuild_lexical(docstore)
            return
        if self.faiss is not None:
            self.faiss.rebuild_lexical()
            return
        assert self._own is not None
        fresh = read_leaves(docstore)
        self._own.delete(sorted(self._own.keys()))
        self._own.add(fresh)


def shared_lexical(vectorstore: VectorStore, docstore: BaseStore[str, Document]) -> LexicalIndex:
    """The lexical index of a child store other than ``FaissIndex``, built once per process."""
    try:
        found = _SHARED.get(vectorstore)
    except TypeError:  # a store that can not be weakly referenced: this retriever's own
        found = None
    if found is not None:
        return found
    lexical = LexicalIndex()
    lexical.add(read_leaves(docstore))
    with contextlib.suppress(TypeError):  # not weakly referable: this retriever's own
        _SHARED[vectorstore] = lexical
    return lexical


def read_leaves(docstore: BaseStore[str, Document]) -> list[Entry]:
    """Every leaf that a manifest in ``docstore`` lists, as lexical entries."""
    try:
        keys = [key for key in docstore.yield_keys() if is_manifest_key(key)]
    except NotImplementedError:
        msg = (
            f"hybrid=True needs the leaves' text of this child store, read from a docstore "
            f"that can list its keys; {type(docstore).__name__} can not: pass hybrid=False."
        )
        raise ValueError(msg) from None
    leaves: list[str] = []
    for start in range(0, len(keys), _BATCH):
        for manifest in docstore.mget(keys[start : start + _BATCH]):
            if manifest is not None:
                leaves.extend(leaf_keys(manifest))
    entries: list[Entry] = []
    for start in range(0, len(leaves), _BATCH):
        batch = leaves[start : start + _BATCH]
        for key, doc in zip(batch, docstore.mget(batch), strict=True):
            if doc is not None:
                entries.append((key, doc.page_content, dict(doc.metadata)))
    return entries


def _entries(leaves: list[Document]) -> list[Entry]:
    return [(str(leaf.id), leaf.page_content, leaf.metadata) for leaf in leaves]
