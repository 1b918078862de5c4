"""The command line's open store: its database, retriever, embedding cache and FAISS index.

The folder, its files and its lock are :mod:`.folder`'s (light: ``s2b list``
uses it alone). Opening the store to search it costs what the search needs
and no more: the settings, then, in the snapshot the command reads, the FAISS
index file of that state (memory-mapped by a command that only reads: no copy,
pages read as a search touches them). Nothing is built from the leaves on
open. A store whose last commit has no FAISS file yet (the run that committed
was interrupted, an older s2b wrote it) gets one built from its vectors once,
by the first command that opens it.

A store made before its leaves had row numbers (schema 2) is brought up to
date by the first command that writes to it (``s2b index``, ``delete``,
``verify --repair``), in one transaction; a command that only reads refuses
it in one line that says so.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli import models
from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.folder import (
    DB_FILE,
    FAISS_FILES,
    LOCK_FILE,
    Embedded,
    FileRow,
    connect,
    counts,
    damaged_files,
    dangling_chunks,
    drop_file,
    files,
    initialise,
    open_database,
    put_file,
    read_embedded,
    record_embedded,
    reindex_pending,
    replace_database,
    size,
    store_error,
    write_listing,
    writer_lock,
)
from langchain_s2b.cli.folder import _check_directory as check_directory
from langchain_s2b.cli.options import INDEX_MODE, PARENT_LEVEL, PARENT_LEVELS
from langchain_s2b.core.headers import DEFAULT_CONTEXTUAL_HEADERS
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.nodes import ContextWriter
from langchain_s2b.store.sqlite import (
    SCHEMA_VERSION,
    CachedEmbeddings,
    Database,
    SQLiteContextCache,
    SQLiteDocStore,
    SQLiteFaissIndex,
    upgrade,
)

__all__ = [
    "DB_FILE",
    "INDEX_MODE",
    "Embedded",
    "LOCK_FILE",
    "PARENT_LEVEL",
    "PARENT_LEVELS",
    "FileRow",
    "Store",
    "initialise",
    "open_or_create",
    "open_store",
    "replace_database",
    "store_error",
    "writer_lock",
]


class Store:
    """An open index directory: its database, retriever and embedding cache.

    Args:
        directory: the index directory.
        db: its open database.
        spec: the store's embedding (a normalised ``provider:model``).
        embedding: that model, already made (else it is made here).
        search: whether this run searches (its retriever is hybrid: the
            lexical index is the database's FTS5 table). A writer writes the
            lexical index all the same: it is part of every leaf's write.
        contexts: whether this run adds documents (the store's context model,
            if it has one, is made; a run that only reads or deletes needs none).

    What is embedded beside each chunk (its header, its context) is the
    store's recorded setting (:class:`~.folder.Embedded`).
    """

    def __init__(
        self,
        directory: Path,
        db: Database,
        spec: str,
        *,
        embedding: Embeddings | None = None,
        search: bool = True,
        contexts: bool = False,
    ) -> None:
        self.directory = directory
        self.db = db
        self.spec = spec
        model = models.make_embedding(spec) if embedding is None else embedding
        self.cache = CachedEmbeddings(model, db)
        self.docstore = SQLiteDocStore(db)
        self.index = SQLiteFaissIndex(self.cache, self.docstore)
        self.embedded = read_embedded(db)
        self.context_cache = SQLiteContextCache(db)
        chat = writer = None
        if contexts and self.embedded.context_model:
            chat = models.make_chat_model(self.embedded.context_model)
        if contexts and self.embedded.proxies and self.embedded.proxy_model:
            writer = models.make_chat_model(self.embedded.proxy_model, "--proxy-model")
        self.retriever = SmallToBigRetriever(
            vectorstore=self.index,
            docstore=self.docstore,
            mode=INDEX_MODE,
            parent_level=PARENT_LEVEL,
            hybrid=search,
            contextual_headers=self.embedded.headers,
            context_model=chat,
            context_cache=self.context_cache,
            proxies=self.embedded.proxies if writer is not None else None,
            proxy_model=writer,
        )
        # the contexts are known by the store's provider:model, whether or not the model is made
        self.retriever._context_name = self.embedded.context_model
        self.retriever._proxy_name = self.embedded.proxy_model
        self.retriever._proxy_kind = self.embedded.proxies

    @property
    def contexts(self) -> ContextWriter | None:
        """The writer of the chunks' contexts (``None``: no context model, or not made)."""
        return self.retriever._io.contexts

    @property
    def proxies(self) -> ContextWriter | None:
        """The writer of model-written proxies (``None``: none, or the model not made)."""
        return self.retriever._io.proxies

    def reindex_pending(self) -> bool:
        """Whether a changed headers or context setting still has files to index again."""
        return reindex_pending(self.db)

    def restore(self, *, read_only: bool = False, mend: bool = True) -> bool:
        """FAISS for the last commit: its file, else built and written; whether it was built.

        ``read_only``: the file is memory-mapped (the command writes nothing).
        ``mend=False``: a damaged file is left as it is (``s2b verify``).
        """
        with self.db.read():
            return self.index.open(self.directory, mapped=read_only, mend=mend)

    def save_index(self, *, replace: bool = False) -> None:
        """After a writer's last commit: the FAISS file of the state it leaves.

        ``replace``: write it even if a file for that state exists (a repair).
        Files of another database (a reader of a replaced one wrote late) go.
        """
        with self.db.read(), contextlib.suppress(OSError):
            self.index.write_file(self.directory, replace=replace)
            stamp = self.db.stamp()
            for other in self.directory.glob(FAISS_FILES):
                if stamp is not None and other.name.split(".")[1] != stamp[0]:
                    other.unlink(missing_ok=True)

    def save_listing(self) -> None:
        """At the end of a writer's run: ``s2b.json``, the settings and files it leaves.

        Best effort: a store whose database or disk fails now says so in the
        command's own error, a damaged list of files is not copied over a sound
        one, and ``verify`` names a listing that is out of date.
        """
        with contextlib.suppress(OSError, sqlite3.Error, ValueError):
            write_listing(self.directory, self.db)

    def upgrade(self) -> bool:
        """Bring a store of an older schema up to date (call under the writer lock)."""
        if self.db.schema() >= SCHEMA_VERSION:
            return False
        with self.db.write():
            upgrade(self.db)
            self.index.lexical_index.rebuild_lexical()
        return True

    # Indexed files ------------------------------------------------------------------

    def files(self) -> dict[str, FileRow]:
        """Every indexed file by path (a row whose bytes are damaged is left out)."""
        return files(self.db)

    def damaged_files(self) -> list[str]:
        """Paths of ``files`` rows whose bytes are damaged."""
        return damaged_files(self.db)

    def counts(self) -> dict[str, int]:
        """Files, documents (distinct, over the files), chunks and vectors in the store."""
        return counts(self.db)

    def dangling_chunks(self) -> int:
        """Chunks whose vector row is gone (damage a cheap query can see)."""
        return dangling_chunks(self.db)

    def size(self) -> int:
        """Bytes the store takes on disk."""
        return size(self.directory)

    def put_file(self, row: FileRow) -> None:
        """Record an indexed file (inside the caller's transaction)."""
        put_file(self.db, row)

    def drop_file(self, path: str) -> None:
        """Forget an indexed file (inside the caller's transaction)."""
        drop_file(self.db, path)

    def close(self) -> None:
        """Close the database."""
        self.db.close()


def open_store(
    directory: Path,
    wanted: str | None = None,
    *,
    embedding: Embeddings | None = None,
    search: bool = True,
    writer: bool = False,
    contexts: bool = False,
) -> Store:
    """Open an existing index; refuse an embedding other than the one it was built with.

    ``embedding`` is the store's model when the caller made it already (it is
    then not made a second time); ``search=False``: see :class:`Store`.
    ``writer``: the caller holds the writer lock (an older store is brought up
    to date, and gets the vector digests that ``find_damage`` checks); a
    reader refuses a store of an older schema in one line.
    """
    db, spec = open_database(directory, wanted)
    try:
        old = db.schema() < SCHEMA_VERSION
    except sqlite3.DatabaseError:
        old = False  # a damaged file: verify --repair says so
    if old and not writer:
        db.close()
        msg = (
            f"the index in {directory} was made by an older s2b; bring it up to date once "
            f"(nothing is embedded again): s2b verify --repair --store {directory}"
        )
        raise UserError(msg)
    store = Store(directory, db, spec, embedding=embedding, search=search, contexts=contexts)
    if writer:
        with contextlib.suppress(sqlite3.DatabaseError):  # a damaged file: verify --repair
            db.add_vector_digests()
            store.upgrade()
    return store


def salvageable(directory: Path) -> Database | None:
    """The store's damaged database file, opened to read what it still can (``None``: not even)."""
    if not (directory / DB_FILE).is_file():
        return None
    try:
        return Database(directory / DB_FILE)
    except sqlite3.Error:
        return None


def open_or_create(
    directory: Path,
    wanted: str | None,
    *,
    search: bool = True,
    headers: bool | None = None,
    context_model: str | None = None,
    proxies: str | None = None,
    proxy_model: str | None = None,
) -> Store:
    """Open the index in ``directory``, creating it (call under the writer lock).

    The embedding model is made once (a new store: before anything is
    written, so that a model that can not start leaves no store behind).
    ``headers``/``context_model`` (``None``: the store's, or the default; a
    context model ``""``: none): a setting other than the store's is recorded,
    with the mark that every file is to be indexed again (:func:`~.folder.reindex_pending`).
    ``proxies``/``proxy_model`` likewise (``proxies=""``: none).
    """
    if context_model:
        models.make_chat_model(context_model)  # fail before anything is written
    if proxy_model:
        models.make_chat_model(proxy_model, "--proxy-model")
    if (directory / DB_FILE).exists():
        db = connect(directory)
        started = db.has_tables()
        db.close()
        if started:
            store = open_store(directory, wanted, search=search, writer=True)
            try:
                _change_embedded(store, headers, context_model, (proxies, proxy_model))
            finally:
                store.close()
            model = store.cache.model  # made once
            return open_store(
                directory, wanted, embedding=model, search=search, writer=True, contexts=True
            )
        # else: a first run died before its first commit; start again (we hold the lock)
    else:
        check_directory(directory, creating=True)
    spec = models.parse_spec(wanted or models.DEFAULT)
    chosen = Embedded(
        DEFAULT_CONTEXTUAL_HEADERS if headers is None else headers,
        models.parse_chat_spec(context_model) if context_model else None,
        *_proxy_setting(Embedded(headers=False), proxies, proxy_model),
    )
    model = models.make_embedding(spec)  # fail before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    db = connect(directory)
    initialise(db, spec, chosen)
    db.close()
    return open_store(directory, wanted, embedding=model, search=search, writer=True, contexts=True)


def _change_embedded(
    store: Store,
    headers: bool | None,
    context_model: str | None,
    proxies: tuple[str | None, str | None] = (None, None),
) -> bool:
    """Record a headers, context or proxy setting other than the store's; whether it changed."""
    was = store.embedded
    model = was.context_model
    if context_model is not None:
        model = models.parse_chat_spec(context_model) if context_model else None
    wanted = Embedded(
        was.headers if headers is None else headers, model, *_proxy_setting(was, *proxies)
    )
    if wanted == was:
        return False
    with store.db.write():
        record_embedded(store.db, wanted, pending=True)
    return True


def _proxy_setting(
    was: Embedded, proxies: str | None, proxy_model: str | None
) -> tuple[str | None, str | None]:
    """The proxies and their model after ``--proxies``/``--proxy-model`` (``None``: as was).

    Raises:
        UserError: proxies without a model, or a model without proxies.
    """
    kind = was.proxies if proxies is None else (proxies or None)
    model = was.proxy_model
    if proxy_model is not None:
        model = models.parse_chat_spec(proxy_model, "--proxy-model")
    if kind is None:
        if proxy_model:
            msg = (
                f"--proxy-model {proxy_model} needs --proxies propositions|summaries|questions "
                "(the store writes none)"
            )
            raise UserError(msg)
        return None, None
    if model is None:
        msg = (
            f"--proxies {kind} needs --proxy-model provider:model (the chat model that writes them)"
        )
        raise UserError(msg)
    return kind, model
