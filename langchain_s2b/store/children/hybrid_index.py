"""The child index with its lexical part: one commit for the vectors and the text.

:class:`HybridChildIndex` is the :class:`~langchain_s2b.store.children.child_index.ChildIndex`
of a retriever with ``hybrid=True``. The lexical index is part of the child
index, and knows every leaf the store holds:

- ``FaissIndex`` keeps it itself (:meth:`FaissIndex.lexical`): read from its
  save, or built from its records when a hybrid retriever opens it, then
  written and removed with every vector under its own lock, saved and loaded
  with it. Every retriever that shares one ``FaissIndex`` shares its lexical
  index.
- A child store that keeps a lexical index of its own, written in its own
  transactions, offers it as a :class:`LexicalBackend` (``lexical_backend()``;
  the command line's SQLite store: FTS5 in the same database). It is searched,
  listed and rebuilt through that backend, and nothing is built when it opens.
- ``PGVector``: PostgreSQL's own full-text search, in the collection's
  database (:mod:`~langchain_s2b.store.lexical.pg_lexical`), so every process that opens
  the collection finds what any other wrote.
- Any other child store gets one filled with the docstore's leaves (every
  manifest's leaves) before its first search or write, by the runner (so an
  async-only docstore is read asynchronously), shared by every retriever of
  this process over the same store object, and written with the vectors. A
  docstore that can not list its keys can not be read that way: ``hybrid=True``
  is then refused in one line.

Every write is one commit: vectors then text on add, text then vectors on
delete (the part that can be put back goes first), and the part already done is
undone when the other fails or is interrupted, before the error goes on up. So
the operation that asked (``lifecycle``) sees a write that happened whole or
not at all, and undoes it as it undoes any other. A retriever with
``hybrid=False`` gets a :class:`DenseChildIndex`: it does not search the text,
but writes through the lexical index another retriever keeps for the same
store object (a copy, or any retriever of the process), so that index, filled
once, never misses a leaf.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Protocol

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.core.hits import Candidate, Hit
from langchain_s2b.core.keys import PROXY_MARK, is_proxy_key
from langchain_s2b.core.requests import Found, TextHits, Vector
from langchain_s2b.core.stored import Entry
from langchain_s2b.store.base import all_or_nothing, undone
from langchain_s2b.store.children.child_index import ChildIndex
from langchain_s2b.store.lexical import Lexical, LexicalIndex, PgLexical, is_pgvector
from langchain_s2b.store.vectors import Located


@dataclass
class _Shared:
    """The lexical index of one child store object, and whether it holds the stored leaves."""

    lexical: Lexical
    built: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_KEY = attrgetter("key")
"""A hit's key."""

_SHARED: weakref.WeakKeyDictionary[Any, _Shared] = weakref.WeakKeyDictionary()
"""The lexical index of each child store object other than ``FaissIndex``, in this process."""


class LexicalBackend(Protocol):
    """A lexical index that its child store writes itself, in the same commit as the vectors."""

    def search_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 among those that pass ``flt`` (selected before ranking)."""

    def lexical_keys(self) -> set[str]:
        """Every leaf key it holds."""

    def rebuild_lexical(self) -> None:
        """Write it again from the leaves the child store holds."""


class DenseChildIndex(ChildIndex):
    """A child index without BM25 search (``hybrid=False``) whose writes keep the text in step.

    Another retriever over the same child store may keep a lexical index for
    it (one shared per store object, marked filled once: it never reads the
    docstore again), so every write goes through it when there is one, in one
    commit with the vectors, as :class:`HybridChildIndex` writes it.
    (``FaissIndex`` and a store with a lexical backend write their text
    themselves.)
    """

    @property
    def _own(self) -> Lexical | None:
        """The lexical index this class writes, if some retriever made one for this store."""
        found = _lookup(self.vectorstore) if self.faiss is None else None
        return None if found is None else found.lexical

    def add(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Index leaves (with their vectors, if given) and their text, in one commit."""
        own = self._own
        if own is None:
            super().add(leaves, vectors)  # FaissIndex writes its text itself
            return
        keys = [str(leaf.id) for leaf in leaves]
        with all_or_nothing() as undo:
            undo.then(lambda: super(DenseChildIndex, self).delete(keys))  # new keys
            super().add(leaves, vectors)
            undo.then(lambda: own.delete(keys))
            own.add(_entries(leaves))

    async def aadd(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Async :meth:`add`."""
        own = self._own
        if own is None:
            await super().aadd(leaves, vectors)
            return
        keys = [str(leaf.id) for leaf in leaves]
        await super().aadd(leaves, vectors)
        try:
            await run_in_executor(None, own.add, _entries(leaves))
        except BaseException as err:
            await undone(
                err,
                lambda: super(DenseChildIndex, self).adelete(keys),
                lambda: run_in_executor(None, own.delete, keys),
            )
            raise

    def delete(self, keys: list[str]) -> None:
        """Delete leaves from both parts, in one commit; keys they do not hold are ignored.

        The text goes first (it can be put back), then the vectors.
        """
        own = self._own
        if own is None:
            super().delete(keys)  # FaissIndex removes its text itself
            return
        held = own.entries(set(keys))
        with all_or_nothing() as undo:
            undo.then(lambda: own.add(held))
            own.delete(keys)
            super().delete(keys)

    async def adelete(self, keys: list[str]) -> None:
        """Async :meth:`delete`."""
        own = self._own
        if own is None:
            await super().adelete(keys)
            return
        held = await run_in_executor(None, own.entries, set(keys))
        try:
            await run_in_executor(None, own.delete, keys)
            await super().adelete(keys)
        except BaseException as err:
            if held:
                await undone(err, lambda: run_in_executor(None, own.add, held))
            raise


class HybridChildIndex(DenseChildIndex):
    """A child index whose leaves are also searchable by BM25, written in one commit.

    The lexical index is the child store's ``lexical_backend()`` when it offers
    one, else ``FaissIndex``'s own, else one shared per store object (see the
    module).
    """

    def __init__(self, vectorstore: VectorStore) -> None:
        super().__init__(vectorstore)
        offered = getattr(vectorstore, "lexical_backend", None)
        self.backend: LexicalBackend | None = offered() if callable(offered) else None
        self._shared: _Shared | None = None
        if self.backend is not None:
            return
        if self.faiss is None:
            self._shared = _shared(vectorstore)
        else:  # built now (once per index), so that no first query pays for it
            self.faiss.lexical()

    @property
    def lexical(self) -> Lexical:
        """The lexical index of this child store (not a backend's)."""
        if self.backend is not None:
            msg = f"This child index searches {type(self.backend).__name__}, not a Lexical index."
            raise TypeError(msg)
        if self.faiss is not None:
            return self.faiss.lexical()
        assert self._shared is not None
        return self._shared.lexical

    @property
    def _own(self) -> Lexical | None:
        """The lexical index this class writes (``None``: the store writes its own)."""
        return None if self._shared is None else self._shared.lexical

    def needs_leaves(self) -> bool:
        """Whether the lexical index has yet to read the docstore's leaves (see :meth:`fill`)."""
        return self._shared is not None and not self._shared.built

    def fill(self, entries: list[Entry]) -> None:
        """Give the lexical index every leaf the docstore holds (once; the runner reads them)."""
        shared = self._shared
        if shared is None:
            return
        with shared.lock:
            if not shared.built:
                shared.lexical.add(entries)
                shared.built = True

    def joined_search(self, vector: Vector, query: str, fetch: int, flt: Any, n: int) -> Found:
        """:meth:`search`, with BM25's ``n`` best joined on rows where the index can.

        See :class:`~langchain_s2b.core.requests.Search` (its ``lexical``):
        ``FaissIndex``, unfiltered, answers :meth:`text_hits` for the hits
        found (their keys ``known``) in the same request, unless a proxy is
        among them (its covers are the caller's).
        """
        found = self.search(vector, query, fetch, flt)
        if not self._joins(n, flt, vector) or _covering(found.hits):
            return found
        known = frozenset(map(_KEY, found.hits))
        return found._replace(joined=self.text_hits(query, n, None, vector, known))

    async def ajoined_search(
        self, vector: Vector, query: str, fetch: int, flt: Any, n: int
    ) -> Found:
        """Async :meth:`joined_search` (a join runs in a worker thread)."""
        if self._joins(n, flt, vector):
            return await run_in_executor(None, self.joined_search, vector, query, fetch, flt, n)
        return await self.asearch(vector, query, fetch, flt)

    def _joins(self, lexical: int, flt: Any, vector: Vector) -> bool:
        """Whether :meth:`joined_search` joins BM25's list to the search on rows."""
        return (
            lexical > 0
            and flt is None
            and vector is not None
            and self.faiss is not None
            and self.backend is None
        )

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

    def text_hits(
        self, query: str, n: int, flt: Any, vector: Vector, known: frozenset[str]
    ) -> TextHits:
        """See :class:`SearchText`: BM25's list, and its leaves outside ``known`` scored.

        ``FaissIndex`` joins the two on rows: a key BM25 read from its row
        column is scored at that row, not looked up again, unless a write came
        between (its :attr:`~FaissIndex.version` moved: then by key, as any
        store). BM25's own search runs without the index's lock.
        """
        index = self.faiss
        if self.backend is not None or index is None or vector is None:
            found = self.search_text(query, n, flt)
            missing = _unscored(found, known)
            return TextHits(found, _tried(missing, self.leaf_hits(missing, flt, vector)))
        located: Located = {}
        stamp = index.version
        found = index.search_text(query, n, flt, located)
        missing = _unscored(found, known)
        with index.hold():  # no write between the check and the scores
            rows = located if index.version == stamp else None
            scored = self.leaf_hits(missing, flt, vector, rows)
        return TextHits(found, _tried(missing, scored))

    async def atext_hits(
        self, query: str, n: int, flt: Any, vector: Vector, known: frozenset[str]
    ) -> TextHits:
        """Async :meth:`text_hits` (another store is searched and scored asynchronously)."""
        if self.backend is None and self.faiss is not None:
            return await run_in_executor(None, self.text_hits, query, n, flt, vector, known)
        found = await self.asearch_text(query, n, flt)
        missing = _unscored(found, known)
        return TextHits(found, _tried(missing, await self.aleaf_hits(missing, flt, vector)))

    def lexical_keys(self) -> set[str]:
        """Every leaf key the lexical index holds (for ``verify``)."""
        if self.backend is not None:
            return self.backend.lexical_keys()
        if self.faiss is not None:
            return self.faiss.lexical_keys()
        return self.lexical.keys()

    def rebuild_lexical(self, entries: list[Entry] | None) -> None:
        """Build the lexical index again (``verify(repair=True)``).

        A backend from its child store; ``FaissIndex`` from its records; any
        other store from ``entries``, the docstore's leaves.
        """
        if self.backend is not None:
            self.backend.rebuild_lexical()
            return
        if self.faiss is not None:
            self.faiss.rebuild_lexical()
            return
        assert self._shared is not None
        with self._shared.lock:
            lexical = self._shared.lexical
            lexical.delete(sorted(lexical.keys()))
            lexical.add(entries or [])
            self._shared.built = True


def _shared(vectorstore: VectorStore) -> _Shared:
    """The lexical index of a child store other than ``FaissIndex``, one per store object.

    ``PGVector``: PostgreSQL's full-text search in its own database (rows
    another process wrote are there already); any other: tantivy in memory.
    """
    try:
        found = _SHARED.get(vectorstore)
    except TypeError:  # a store that can not be weakly referenced: this retriever's own
        return _new_shared(vectorstore)
    if found is None:
        found = _new_shared(vectorstore)
        with contextlib.suppress(TypeError):
            _SHARED[vectorstore] = found
    return found


def _lookup(vectorstore: VectorStore) -> _Shared | None:
    """The lexical index some retriever made for this child store object, if any."""
    try:
        return _SHARED.get(vectorstore)
    except TypeError:
        return None


def _new_shared(vectorstore: VectorStore) -> _Shared:
    if is_pgvector(vectorstore):
        lexical = PgLexical(vectorstore)
        return _Shared(lexical, built=len(lexical) > 0)
    return _Shared(LexicalIndex())


def _covering(hits: Sequence[Candidate]) -> bool:
    """Whether a proxy's own hit is among ``hits`` (the caller searches BM25 for its covers)."""
    return Hit in set(map(type, hits)) and any(
        isinstance(hit, Hit) and hit.covers is not None for hit in hits
    )


def _unscored(found: list[tuple[str, float]], known: frozenset[str]) -> list[str]:
    """BM25's leaves the dense search did not return, in its order (a proxy is the caller's)."""
    return [key for key, _ in found if key not in known and PROXY_MARK not in key]


def _tried(missing: list[str], scored: dict[str, Candidate]) -> dict[str, Candidate | None]:
    """Each leaf asked for: its hit, or ``None`` (held no more, filtered out, not scored)."""
    return {key: scored.get(key) for key in missing}


def _entries(leaves: list[Document]) -> list[Entry]:
    """The leaves' lexical entries, proxies left out.

    This index is filled again from the docstore's leaves in every process, and
    the docstore holds no proxy: with such a store, proxies are searched densely only.
    """
    return [
        (str(leaf.id), leaf.page_content, leaf.metadata)
        for leaf in leaves
        if not is_proxy_key(str(leaf.id))
    ]
