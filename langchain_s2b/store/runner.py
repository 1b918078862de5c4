"""The one request runner: carries out every operation's requests, sync or async, under a lock.

Retrieval, batch, add/delete and verify are operations (generators of
:mod:`~langchain_s2b.core.requests`). :meth:`Runner.run` and
:meth:`Runner.arun` are the only place where the sync and async paths differ;
:func:`drive` and :func:`adrive` feed an operation its answers. Dispatch is
exhaustive: a request of an unknown type is a ``TypeError``, never a guess.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.stores import BaseStore

from langchain_s2b.core.requests import (
    AddLeaves,
    CheckChildren,
    EmbedLeaves,
    EmbedQueries,
    EmbedQuery,
    Fetch,
    LeafHits,
    LexicalKeys,
    ListChildren,
    MendChildren,
    Op,
    Put,
    ReadHits,
    ReadLeaves,
    ReadRuns,
    ReadSpans,
    RebuildLexical,
    Remove,
    RemoveLeaves,
    Request,
    Rerank,
    ScanKeys,
    Search,
    SearchMany,
    SearchText,
    TextHits,
    WriteContexts,
    WriteProxies,
)
from langchain_s2b.core.stored import stored_leaves
from langchain_s2b.store.children import ChildIndex, HybridChildIndex
from langchain_s2b.store.nodes import ContextWriter, NodeStore

T = TypeVar("T")


class Runner:
    """Carries out requests against one child index and one docstore, under one lock.

    The lock belongs to the child store: every runner of this process over the
    same store object (retrievers sharing an index, copies, a
    ``configurable_fields`` retriever made per call) shares it, so a reader of
    one never sees half a write of another.
    """

    def __init__(
        self,
        index: ChildIndex,
        docstore: BaseStore[str, Document],
        contexts: ContextWriter | None = None,
        proxies: ContextWriter | None = None,
    ) -> None:
        self.index = index
        self.docstore = docstore
        self.contexts = contexts
        """Writes the leaves' contexts (:class:`WriteContexts`), when there is a context model."""
        self.proxies = proxies
        """Writes model-written proxies (:class:`WriteProxies`), when there is a proxy model."""
        self.lock = shared_lock(index.vectorstore)

    def _proxy_writer(self) -> ContextWriter:
        if self.proxies is None:
            msg = "Proxies were asked for, but this retriever has no proxy_model."
            raise ValueError(msg)
        return self.proxies

    def _writer(self) -> ContextWriter:
        if self.contexts is None:
            msg = "A context was asked for, but this retriever has no context_model."
            raise ValueError(msg)
        return self.contexts

    def drive(self, op: Op[T], *, write: bool = False, locked: bool = True) -> T:
        """Run one operation under the lock (readers never see half a write).

        ``locked=False`` runs it without the lock: only for operations that
        change nothing and tolerate a concurrent write (``lifecycle.stage``).
        A lexical index that has yet to read the docstore's leaves reads them
        first, under the same lock.
        """
        if not locked:
            return drive(op, self.run)
        with self.lock.hold(write=write):
            if self._lexical_waits():
                self._fill(drive(stored_leaves(), self.run))
            return drive(op, self.run)

    async def adrive(self, op: Op[T], *, write: bool = False, locked: bool = True) -> T:
        """Async :meth:`drive`."""
        if not locked:
            return await adrive(op, self.arun)
        async with self.lock.ahold(write=write):
            if self._lexical_waits():
                entries = await adrive(stored_leaves(), self.arun)
                await run_in_executor(None, self._fill, entries)
            return await adrive(op, self.arun)

    def _lexical_waits(self) -> bool:
        index = self.index
        return isinstance(index, HybridChildIndex) and index.needs_leaves()

    def _fill(self, entries: list[Any]) -> None:
        index = self.index
        if isinstance(index, HybridChildIndex):
            index.fill(entries)

    def run(self, request: Request[Any]) -> Any:
        """Carry out one request synchronously."""
        index, store = self.index, self.docstore
        match request:
            case EmbedQuery(query):
                return index.embed_query(query)
            case EmbedQueries(queries):
                return index.embed_queries(queries)
            case Search(vector, query, fetch, flt, lexical):
                if lexical and isinstance(index, HybridChildIndex):
                    return index.joined_search(vector, query, fetch, flt, lexical)
                return index.search(vector, query, fetch, flt)
            case SearchMany(vectors, queries, fetch, flt):
                return index.search_many(vectors, queries, fetch, flt)
            case SearchText(query, n, flt, vector, known):
                if isinstance(index, HybridChildIndex):
                    return index.text_hits(query, n, flt, vector, known)
                return TextHits([], {})
            case LeafHits(keys, flt, vector):
                return index.leaf_hits(keys, flt, vector)
            case ReadHits(keys):
                return index.read_hits(keys)
            case Rerank(reranker, query, documents):
                return list(reranker.compress_documents(documents, query))
            case Fetch(keys):
                return store.mget(keys)
            case ReadLeaves(keys, whole):
                if isinstance(store, NodeStore):
                    return store.read_leaves(keys, whole)
                return store.mget(keys)
            case ReadSpans(spans):
                if isinstance(store, NodeStore):
                    return store.read_spans(spans)
                return [None] * len(spans)
            case ReadRuns(runs):
                if isinstance(store, NodeStore):
                    return store.read_runs(runs)
                return request.by_run(store.mget(request.keys()))
            case Put(pairs):
                return store.mset(pairs)
            case Remove(keys):
                return store.mdelete(keys)
            case EmbedLeaves(texts):
                return index.embed_leaves(texts)
            case WriteContexts(pieces):
                return self._writer().write(pieces)
            case WriteProxies(pieces):
                return self._proxy_writer().write(pieces)
            case AddLeaves(leaves, vectors):
                return index.add(leaves, vectors)
            case RemoveLeaves(keys):
                return index.delete(keys)
            case ScanKeys():
                return list(store.yield_keys())
            case ListChildren(candidates):
                return index.list_children(candidates)
            case CheckChildren():
                return index.damage()
            case MendChildren():
                return index.mend()
            case LexicalKeys():
                return index.lexical_keys() if isinstance(index, HybridChildIndex) else None
            case RebuildLexical():
                if isinstance(index, HybridChildIndex):
                    fresh = None if index.faiss is not None else drive(stored_leaves(), self.run)
                    index.rebuild_lexical(fresh)
                return None
            case _:
                raise _unknown(request)

    async def arun(self, request: Request[Any]) -> Any:
        """Carry out one request asynchronously."""
        index, store = self.index, self.docstore
        match request:
            case EmbedQuery(query):
                return await index.aembed_query(query)
            case EmbedQueries(queries):
                return await index.aembed_queries(queries)
            case Search(vector, query, fetch, flt, lexical):
                if lexical and isinstance(index, HybridChildIndex):
                    return await index.ajoined_search(vector, query, fetch, flt, lexical)
                return await index.asearch(vector, query, fetch, flt)
            case SearchMany(vectors, queries, fetch, flt):
                return await index.asearch_many(vectors, queries, fetch, flt)
            case SearchText(query, n, flt, vector, known):
                if isinstance(index, HybridChildIndex):
                    return await index.atext_hits(query, n, flt, vector, known)
                return TextHits([], {})
            case LeafHits(keys, flt, vector):
                return await index.aleaf_hits(keys, flt, vector)
            case ReadHits(keys):
                return await run_in_executor(None, index.read_hits, keys)
            case Rerank(reranker, query, documents):
                return list(await reranker.acompress_documents(documents, query))
            case Fetch(keys):
                return await store.amget(keys)
            case ReadLeaves(keys, whole):
                if isinstance(store, NodeStore):
                    return await run_in_executor(None, store.read_leaves, keys, whole)
                return await store.amget(keys)
            case ReadSpans(spans):
                if isinstance(store, NodeStore):
                    return await run_in_executor(None, store.read_spans, spans)
                return [None] * len(spans)
            case ReadRuns(runs):
                if isinstance(store, NodeStore):
                    return await run_in_executor(None, store.read_runs, runs)
                return request.by_run(await store.amget(request.keys()))
            case Put(pairs):
                return await store.amset(pairs)
            case Remove(keys):
                return await store.amdelete(keys)
            case EmbedLeaves(texts):
                return await index.aembed_leaves(texts)
            case WriteContexts(pieces):
                return await self._writer().awrite(pieces)
            case WriteProxies(pieces):
                return await self._proxy_writer().awrite(pieces)
            case AddLeaves(leaves, vectors):
                return await index.aadd(leaves, vectors)
            case RemoveLeaves(keys):
                return await index.adelete(keys)
            case ScanKeys():
                return [key async for key in store.ayield_keys()]
            case ListChildren(candidates):
                return await index.alist_children(candidates)
            case CheckChildren() | MendChildren():
                return await run_in_executor(None, self.run, request)
            case LexicalKeys():
                return await run_in_executor(None, self.run, request)
            case RebuildLexical():
                if isinstance(index, HybridChildIndex):
                    fresh = None
                    if index.faiss is None:
                        fresh = await adrive(stored_leaves(), self.arun)
                    await run_in_executor(None, index.rebuild_lexical, fresh)
                return None
            case _:
                raise _unknown(request)


_LOCKS: weakref.WeakKeyDictionary[Any, ReadWriteLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def shared_lock(store: Any) -> ReadWriteLock:
    """The reader/writer lock of a child store object (its own if it can not be referenced)."""
    with _LOCKS_GUARD:
        try:
            found = _LOCKS.get(store)
            if found is None:
                found = _LOCKS[store] = ReadWriteLock()
        except TypeError:  # not weakly referable
            return ReadWriteLock()
        return found


def _unknown(request: object) -> TypeError:
    msg = f"The runner does not know the request {request!r}; it carries out none it can't name."
    return TypeError(msg)


def drive(op: Op[T], run: Callable[[Request[Any]], Any]) -> T:
    """Run an operation to its end; a failed request's error is thrown into it.

    Any error: a ``KeyboardInterrupt`` during a write reaches the operation
    too, which undoes what it wrote and raises it again.
    """
    try:
        request = next(op)
        while True:
            try:
                answer = run(request)
            except BaseException as err:
                request = op.throw(err)
            else:
                request = op.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(op: Op[T], arun: Callable[[Request[Any]], Awaitable[Any]]) -> T:
    """Async :func:`drive`.

    A cancellation (``asyncio.wait_for`` timing out) is thrown into the
    operation like any error, but only once the request it interrupted has
    finished: a write running in a worker thread can not be stopped halfway,
    and the operation's undo must come after it, never beside it.
    """
    try:
        request = next(op)
        while True:
            try:
                answer = await _finished(arun(request))
            except BaseException as err:
                request = op.throw(err)
            else:
                request = op.send(answer)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def _finished(call: Awaitable[Any]) -> Any:
    """``await call``; if the caller is cancelled meanwhile, wait for ``call``, then re-raise."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller sees
        raise


class ReadWriteLock:
    """Many readers or one writer, for threads and coroutines alike.

    A waiting writer, a thread or a coroutine, holds off new readers, so a
    stream of queries can not starve an update. Coroutines wait by polling
    (``asyncio.sleep``), never in a worker thread: a reader that holds the lock
    may itself need the default executor (a sync-only store, the FAISS search)
    to finish. Not re-entrant.

    Hand-written because no maintained package offers one lock shared by
    threads and coroutines: ``aiorwlock`` serves only coroutines of one event
    loop, ``readerwriterlock`` and ``fasteners`` only threads.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire_read(self, *, blocking: bool = True) -> bool:
        """Take a shared hold; ``False`` if ``blocking`` is off and it is busy."""
        with self._cond:
            while self._writer or self._writers_waiting:
                if not blocking:
                    return False
                self._cond.wait()
            self._readers += 1
            return True

    def release_read(self) -> None:
        """Give a shared hold back."""
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self, *, blocking: bool = True) -> bool:
        """Take the exclusive hold; ``False`` if ``blocking`` is off and it is busy.

        A non-blocking attempt by a caller that has announced itself with
        :meth:`wait_for_write` succeeds as soon as the readers are gone.
        """
        with self._cond:
            if not blocking:
                if self._writer or self._readers:
                    return False
                self._writer = True
                return True
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
            return True

    def release_write(self) -> None:
        """Give the exclusive hold back."""
        with self._cond:
            self._writer = False
            self._cond.notify_all()

    @contextmanager
    def wait_for_write(self) -> Iterator[None]:
        """Count the caller as a waiting writer (new readers hold off) while inside."""
        with self._cond:
            self._writers_waiting += 1
        try:
            yield
        finally:
            with self._cond:
                self._writers_waiting -= 1
                self._cond.notify_all()

    def hold(self, *, write: bool) -> _Hold:
        """``with lock.hold(write=...):`` in a thread."""
        return _Hold(self, write)

    @asynccontextmanager
    async def ahold(self, *, write: bool) -> AsyncIterator[None]:
        """``async with lock.ahold(write=...):`` in a coroutine."""
        if write:
            with self.wait_for_write():
                await _poll(self.acquire_write)
        else:
            await _poll(self.acquire_read)
        try:
            yield
        finally:
            self.release_write() if write else self.release_read()


class _Hold:
    """The context of :meth:`ReadWriteLock.hold`.

    A plain class, not a ``contextmanager`` generator: every query takes one,
    and the generator costs a few µs more.
    """

    __slots__ = ("_lock", "_write")

    def __init__(self, lock: ReadWriteLock, write: bool) -> None:
        self._lock = lock
        self._write = write

    def __enter__(self) -> None:
        self._lock.acquire_write() if self._write else self._lock.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_write() if self._write else self._lock.release_read()


async def _poll(acquire: Callable[..., bool]) -> None:
    delay = 0.0005
    while not acquire(blocking=False):
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)
