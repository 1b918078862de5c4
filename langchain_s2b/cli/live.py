"""An index that a long-running process reads while ``s2b index`` commits to it (``s2b serve``).

A command opens the store, answers and exits; a server keeps it open, so it
must notice what other processes commit. Every call here works inside one
SQLite read transaction (a WAL snapshot: it never waits for a writer, and sees
each writer's commit whole or not at all) and first reads the store's
:func:`commit_stamp` in that snapshot:

- the same stamp as last time: the open index is current, and is used;
- another stamp: the index of this snapshot is opened (the FAISS file the
  writer left for that commit, memory-mapped; built from the database only
  when there is none), then used; the previous one stays served if that fails;
- the database file was replaced or removed (``rm -r DIR; s2b index ...``):
  the store is opened again, with the one-line errors of ``open_store`` (no
  index there, another embedding model).

So the next call after a commit answers from the new state, and calls between
commits cost one ``PRAGMA`` and one ``stat``. The store has one SQLite
connection, so its snapshots are taken one call at a time, under a lock; the
slow part of a search, the embedding model, runs before it, outside the lock
(the query's vector is kept for the snapshot's search), so a slow query holds
up no other call.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.index_dir import DB_FILE, Store, open_store
from langchain_s2b.cli.querying import damaged
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.ingest import nodes_key
from langchain_s2b.core.keys import encode_source_key, manifest_key, node_key
from langchain_s2b.core.tree import DOC_LEVEL
from langchain_s2b.store.sqlite import Database


def commit_stamp(db: Database) -> tuple[str, int] | None:
    """The store's commit counter in the snapshot being read (call in a read transaction).

    ``(database id, counter)``: the counter rises with every commit that
    changes what a search sees (:mod:`langchain_s2b.store.sqlite.database`), in that
    commit; batches of new vectors that an indexing run commits before its
    files do not count. Read inside the caller's snapshot, it belongs to the
    state the caller reads.
    """
    return db.stamp()


@dataclass(frozen=True)
class Holdings:
    """What an index holds: its files, their documents and chunks."""

    files: int
    documents: int
    chunks: int
    folder: str | None
    """The deepest folder that holds every indexed file (``None`` for no file)."""
    embedding: str
    """The store's embedding model (``provider:model``)."""


def _identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of a file, ``None`` when it does not exist."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


class LiveStore:
    """The store in ``directory``, as of the last commit, for every call.

    Args:
        directory: the index directory (it need not exist yet: calls then
            fail with the one-line error of ``open_store`` until it does).
        wanted: the embedding the caller expects (``--embedding``); a store
            built with another one is refused, call by call.
    """

    def __init__(self, directory: Path, wanted: str | None = None) -> None:
        self.directory = directory
        self.wanted = wanted
        self.restores = 0
        """How many times an index was opened (once per commit seen)."""
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._identity: tuple[int, int] | None = None
        self._stamp: tuple[str, int] | None = None

    # Calls --------------------------------------------------------------------------

    def embedding(self) -> Embeddings:
        """The store's embedding model (what a query is cut to: ``querying.cut_question``)."""
        with self._lock:
            model = self._open().cache.model
        return model.model if isinstance(model, RecentQueries) else model

    def search(self, query: str, options: Mapping[str, Any]) -> list[Document]:
        """The retriever's results for ``query`` with ``options`` (``retriever.invoke``).

        The query's vector is made first, outside the lock, so that other
        calls go on while the model works; the search in the snapshot then
        finds it made.
        """
        with self._lock:
            model = self._open().cache.model
        model.embed_query(query)
        with self._snapshot() as store:
            return store.retriever.invoke(query, **options)

    def read(self, source_id: str) -> Document:
        """The ``doc`` node of a source: its whole text as indexed, and its metadata."""
        with self._snapshot() as store:
            found = store.docstore.mget([manifest_key(encode_source_key(source_id))])[0]
            if found is not None:
                doc = store.docstore.mget([node_key(nodes_key(found), DOC_LEVEL, 0)])[0]
                if doc is not None:
                    return doc
        msg = (
            f"{source_id!r} is not a source in the index at {self.directory}; "
            "read takes a source id from the search results"
        )
        raise UserError(msg)

    def holdings(self) -> Holdings:
        """Counts of the indexed files, documents and chunks, and their common folder."""
        with self._snapshot() as store:
            paths = list(store.files())
            counts = store.counts()  # what s2b list counts: a shared JSONL row once
            spec = store.spec
        folder = None
        if paths:
            folder = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
        return Holdings(
            files=counts["files"],
            documents=counts["documents"],
            chunks=counts["chunks"],
            folder=folder,
            embedding=spec,
        )

    def close(self) -> None:
        """Close the database (a later call opens it again)."""
        with self._lock:
            self._drop()

    # The snapshot -------------------------------------------------------------------

    @contextmanager
    def _snapshot(self) -> Iterator[Store]:
        """The store, its index current with one read snapshot held for the block."""
        with self._lock:
            store = self._open()
            try:
                with store.db.read():
                    stamp = commit_stamp(store.db)
                    if stamp != self._stamp:
                        store = self._rebuild(store, stamp)
                    yield store
            except MissingNodeError as err:
                raise damaged(self.directory, err) from None

    def _open(self) -> Store:
        identity = _identity(self.directory / DB_FILE)
        if self._store is not None and identity == self._identity:
            return self._store
        self._drop()
        store = open_store(self.directory, self.wanted)
        store.cache.model = RecentQueries(store.cache.model)
        self._store, self._identity, self._stamp = store, identity, None
        return store

    def _rebuild(self, store: Store, stamp: tuple[str, int] | None) -> Store:
        """The index of the current snapshot; the old one stays if this fails."""
        fresh = Store(self.directory, store.db, store.spec, embedding=store.cache.model)
        fresh.restore(read_only=True)
        self._store, self._stamp = fresh, stamp
        self.restores += 1
        return fresh

    def _drop(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store, self._identity, self._stamp = None, None, None


class RecentQueries(Embeddings):
    """A model that keeps the vectors of its last ``size`` queries (passages go through).

    :meth:`LiveStore.search` embeds a query before it takes the lock; the
    search under the lock then finds the vector here. Safe across threads.
    """

    def __init__(self, model: Embeddings, size: int = 32) -> None:
        self.model = model
        self.size = size
        self._recent: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The model's passage vectors."""
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """The query's vector: kept from a recent call, else made by the model (and kept)."""
        with self._lock:
            known = self._recent.get(text)
            if known is not None:
                self._recent.move_to_end(text)
                return list(known)
        vector = list(self.model.embed_query(text))
        with self._lock:
            self._recent[text] = vector
            while len(self._recent) > self.size:
                self._recent.popitem(last=False)
        return list(vector)
