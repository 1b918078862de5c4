"""The child index with its lexical twin: every leaf added or deleted goes to both.

:class:`HybridChildIndex` is the :class:`~langchain_s2b.store.child_index.ChildIndex`
of a retriever with ``hybrid=True``. The runner's ``AddLeaves`` and
``RemoveLeaves`` reach both indexes through it (vectors first, then text), so
every path that writes leaves (add, update, delete, repair) keeps them
together, and a failed text write fails the request like a failed vector
write: the operation that asked undoes it as it undoes any other.

A FAISS child index filled some other way (an index passed in already full,
a save made without hybrid search, the command line's store rebuilding FAISS
on open) is caught up before the next search or write: when the two hold a
different number of leaves, the text index is brought level with FAISS's own
records (one pass, under a lock of its own, so concurrent readers do it once).
"""

from __future__ import annotations

import threading

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore

from langchain_s2b.store.child_index import ChildIndex
from langchain_s2b.store.lexical_index import LexicalIndex


class HybridChildIndex(ChildIndex):
    """A child index whose leaves are also searchable by BM25."""

    def __init__(self, vectorstore: VectorStore, lexical: LexicalIndex) -> None:
        super().__init__(vectorstore)
        self.lexical = lexical
        self._sync_lock = threading.Lock()

    def sync(self) -> None:
        """Bring the text index level with FAISS's records when their sizes differ."""
        faiss = self.faiss
        if faiss is None or len(self.lexical) == len(faiss):
            return
        with self._sync_lock:
            if len(self.lexical) == len(faiss):
                return
            held, keys = self.lexical.keys(), set(faiss.keys())
            self.lexical.delete(sorted(held - keys))
            self.lexical.add(faiss.get_by_ids(sorted(keys - held)))

    def add(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Index leaves (with their vectors, if given) and their text."""
        self.sync()
        super().add(leaves, vectors)
        self.lexical.add(leaves)

    async def aadd(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Async :meth:`add`."""
        await run_in_executor(None, self.sync)
        await super().aadd(leaves, vectors)
        await run_in_executor(None, self.lexical.add, leaves)

    def delete(self, keys: list[str]) -> None:
        """Delete leaves from both indexes; keys they do not hold are ignored."""
        self.sync()
        super().delete(keys)
        self.lexical.delete(keys)

    async def adelete(self, keys: list[str]) -> None:
        """Async :meth:`delete`."""
        await run_in_executor(None, self.sync)
        await super().adelete(keys)
        await run_in_executor(None, self.lexical.delete, keys)

    def search_text(self, query: str, n: int) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25."""
        self.sync()
        return self.lexical.search(query, n)

    async def asearch_text(self, query: str, n: int) -> list[tuple[str, float]]:
        """Async :meth:`search_text`."""
        return await run_in_executor(None, self.search_text, query, n)
