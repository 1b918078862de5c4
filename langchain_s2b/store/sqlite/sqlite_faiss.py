"""``SQLiteFaissIndex``: records in SQLite, FAISS in a file named after the commit counter.

The FAISS file of a commit is built from the ``children`` and ``vectors``
tables only when there is no checked file for that state
(:mod:`~langchain_s2b.store.sqlite.index_file`), and older files are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.store.sqlite.cached_embeddings import CachedEmbeddings, _common_size, text_hash
from langchain_s2b.store.sqlite.docstore import SQLiteDocStore
from langchain_s2b.store.sqlite.index_file import (
    INDEX_FILE,
    index_file,
    read_record,
    record_existing,
)
from langchain_s2b.store.sqlite.index_file import check as check_file
from langchain_s2b.store.sqlite.index_file import write as write_index_file
from langchain_s2b.store.sqlite.rows import SQLiteRows
from langchain_s2b.store.sqlite.sqlite_lexical import SQLiteLexical
from langchain_s2b.store.vectors import FaissIndex, normalise, read_faiss_file

__all__ = ["SQLiteFaissIndex"]


_REBUILD_BATCH = 20_000
_READER_WAIT = 1.0
"""Seconds a command that only reads waits to record a FAISS file it wrote (then: unrecorded)."""


class SQLiteFaissIndex(FaissIndex):
    """A :class:`FaissIndex` whose records live in the database, and its file beside it.

    Every way in (``add_texts``, and ``add_vectors`` with vectors embedded ahead
    of the write) stores the vector by content hash and the leaf as a
    ``children`` row and its terms (:class:`SQLiteRows`); ``delete`` removes
    them. Both join the caller's transaction, so the child index commits with
    the nodes. The FAISS index itself is a file named after the database's
    commit counter (:func:`index_file`): :meth:`open` reads the file of the
    state being read (memory-mapped for a reader: no copy, pages read as a
    search touches them), and only when there is none builds it from the
    vectors in the database and writes it. A file that fails its checks
    (:func:`~langchain_s2b.store.sqlite.index_file.check`: size, header, count) is
    never searched: FAISS is built from the database instead, the problem is
    kept in :attr:`file_problem`, and the file is written again. A hit's key,
    text and metadata are read from the database when a search returns it:
    nothing is read per leaf when the index opens.

    Args:
        embedding: the store's model behind its vector cache.
        docstore: the store's docstore (the leaves' text and metadata).
    """

    def __init__(self, embedding: CachedEmbeddings, docstore: SQLiteDocStore) -> None:
        super().__init__(embedding)
        self.cache = embedding
        self.db = embedding.db
        self.docstore = docstore
        self.lexical_index = SQLiteLexical(self.db, self.matching_sources, docstore.mget)
        self._sql = SQLiteRows(self.db, docstore, self.lexical_index)
        self._rows = self._sql
        self.read_only = False
        """Opened memory-mapped: a write is refused (FAISS can not add to a mapped index)."""
        self.unrestored: list[str] = []
        """Leaves the last build left out: their vector is absent or unusable."""
        self.built = 0
        """How many times this object built FAISS from the database (not from a file)."""
        self.on_add: Callable[[int], object] | None = None
        """Told how many leaves each add wrote (a command's progress)."""
        self._room = 0
        self.file_problem: str | None = None
        """What was wrong with the FAISS file of the state the last :meth:`open` read."""
        self.file_written = False
        """Whether the last :meth:`open` wrote the file of its state (it had to build FAISS);
        for a damaged file of a state without chunks: whether it removed it."""

    embeds_on_add = True
    """Leaves come without vectors (:class:`~.child_index.ChildIndex`): :meth:`add_texts` reads
    each batch's from the vector cache, so no call holds every leaf's vector."""

    @property
    def released(self) -> set[int]:
        """Vector ids of deleted leaves (candidates for ``collect_garbage``)."""
        return self._sql.released

    def lexical_backend(self) -> SQLiteLexical:
        """The lexical index a hybrid retriever searches: FTS5 in the same database."""
        return self.lexical_index

    def _check_writable(self) -> None:
        if self.read_only:
            msg = "This index was opened read-only (memory-mapped) by a command that only reads."
            raise ValueError(msg)

    def add_vectors(
        self,
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        """Add leaves with their vectors: FAISS in memory, the rows in the database."""
        matrix = np.asarray(vectors, dtype=np.float32)
        with self.db.write():
            if len(matrix) == len(texts) == len(metadatas):
                embedded = [embedded_text(t, m) for t, m in zip(texts, metadatas, strict=True)]
                rows = [(text_hash(t), v.tobytes()) for t, v in zip(embedded, matrix, strict=True)]
                self.db.insert_vectors(rows)
            return self._add(matrix, texts, metadatas, ids)

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add leaves under ``ids``; their vectors are read from the cache (embedded if missing).

        A leaf's vector is the one of its text with its header and context
        (:func:`~langchain_s2b.core.headers.embedded_text`). The vectors come as one
        float32 matrix (:meth:`CachedEmbeddings.vectors_for`), never as Python floats.
        """
        texts = list(texts)
        if ids is None or len(ids) != len(texts):
            msg = "SQLiteFaissIndex.add_texts needs one id per text (the child node keys)."
            raise ValueError(msg)
        if not texts:
            return []
        metas = metadatas or [{} for _ in texts]
        with self.db.write():
            matrix, _ = self.cache.vectors_for(
                [embedded_text(t, m) for t, m in zip(texts, metas, strict=True)]
            )
            return self._add(matrix, texts, metas, ids)

    def _add(
        self,
        matrix: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        added = super().add_vectors(matrix, texts, metadatas, ids)
        if self._room:
            self._grow(self._room - len(ids))
            self._room = 0
        if self.on_add is not None:
            self.on_add(len(ids))
        return added

    def make_room(self, leaves: int) -> None:
        """Make FAISS's storage room for ``leaves`` more vectors at once (added in batches next).

        A flat index grows its storage (a ``std::vector``) by doubling it, with
        a copy: at the last copy the old and the new storage are held together,
        twice the index. Grown once to what the adds will need, it is never
        copied. Done at the next add (the first add makes the index).
        """
        self._room = max(0, leaves)
        if self._index is not None:
            self._grow(self._room)
            self._room = 0

    def _grow(self, leaves: int) -> None:
        if leaves <= 0 or self._index is None or self._staging is not None:
            return
        inner = faiss.downcast_index(self._index.index)
        codes = getattr(inner, "codes", None)
        if not isinstance(inner, faiss.IndexFlatCodes) or codes is None or not codes.is_owned:
            return
        size = codes.size()
        codes.resize(size + leaves * inner.code_size)  # the capacity stays when it shrinks
        codes.resize(size)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove leaves by key (``None``: all) from FAISS and from the database."""
        with self.db.write():
            return super().delete(ids)

    # The FAISS file -------------------------------------------------------------------

    def open(self, directory: Path, *, mapped: bool = False, mend: bool = True) -> bool:
        """FAISS for the state being read (call in its transaction); whether it was built.

        The file of this state is checked and read (``mapped``: memory-mapped,
        read-only). Without one, or when it fails its checks
        (:attr:`file_problem` says why), FAISS is built from the database and
        the file written, over the damaged one unless ``mend=False`` (``s2b
        verify`` without ``--repair`` changes nothing); a store that can not
        be written to is read all the same (:attr:`file_written` says).
        """
        stamp = self.db.stamp()
        file = None if stamp is None else index_file(directory, stamp)
        top = self.db.conn.execute("SELECT max(row) FROM children").fetchone()[0]
        self._next_id = 0 if top is None else int(top) + 1
        self.unrestored = []
        self.file_problem = None
        self.file_written = False
        if file is not None and os.path.lexists(file):
            problem = check_file(file, self.db)
            if problem is None:
                try:
                    self._adopt(read_faiss_file(file, mapped=mapped))
                except ValueError as err:
                    problem = str(err)
                else:
                    self.read_only = mapped
                    return False
            self.file_problem = problem
        self.build()
        if file is not None and (mend or self.file_problem is None):
            with contextlib.suppress(OSError):
                replace = self.file_problem is not None
                self.file_written = self.write_file(directory, replace=replace, wait=_READER_WAIT)
        if file is not None and self.file_problem is not None and self._index is None:
            self.file_written = not os.path.lexists(file)  # no chunks: no file
        return True

    def _adopt(self, index: Any) -> None:
        with self._lock:
            self._index, self._staging, self._dim = index, None, int(index.d)
            self._dead.clear()
            self._parsed.clear()
            self._version += 1

    def build(self) -> None:
        """FAISS from the vectors in the database (a leaf whose vector is bad is left out)."""
        self.built += 1
        conn = self.db.conn
        size = _common_size(self.db)
        sql = (
            "SELECT c.row, c.key, v.vec FROM children c LEFT JOIN vectors v ON v.id = c.vec "
            "ORDER BY c.row"
        )
        index = None
        cursor = conn.execute(sql)
        while batch := cursor.fetchmany(_REBUILD_BATCH):
            rows, vectors = [], []
            for row, key, vec in batch:
                data = None if vec is None or len(vec) != size else np.frombuffer(vec, np.float32)
                if data is None or not np.isfinite(data).all():
                    self.unrestored.append(str(key))
                    continue
                rows.append(row)
                vectors.append(data)
            if rows:
                if index is None:
                    index = self._new_index(len(vectors[0]))
                index.add_with_ids(normalise(np.stack(vectors)), np.asarray(rows, dtype=np.int64))
        self.read_only = False
        if index is None:
            with self._lock:
                self._index, self._staging, self._dim = None, None, None
                self._version += 1
        else:
            self._adopt(index)

    def write_file(
        self, directory: Path, *, replace: bool = False, wait: float | None = None
    ) -> bool:
        """Write FAISS as the file of the state being read; remove the other states' files.

        A store without leaves has no file. A file already there for this state
        is kept (and recorded, if a store made before records left it without
        one), unless ``replace`` (a repair: the file is damaged or does not
        match the database). The new file is written beside it, renamed over
        it and recorded (:func:`~langchain_s2b.store.sqlite.index_file.write`; ``wait``:
        seconds to wait for another writer to record it, default the
        database's timeout). A failed write is an ``OSError``. Returns whether
        a file was written.
        """
        stamp = self.db.stamp()
        if stamp is None:
            return False
        if self._index is None:  # no leaves: no file, for this state or an older one
            _remove_older(directory, stamp, keep=None)
            return False
        file = index_file(directory, stamp)
        wait = self.db.timeout if wait is None else wait
        written = replace or not os.path.lexists(file)
        if written:
            write_index_file(self._index, self.db, file, wait=wait)
        elif read_record(self.db, file) is None and check_file(file, self.db) is None:
            record_existing(self.db, file, wait=wait)
        _remove_older(directory, stamp, keep=file)
        return written

    def restore(self, docstore: BaseStore[str, Document] | None = None) -> int:
        """Build FAISS from the database (call inside a read transaction); the leaves in it."""
        self.build()
        return 0 if self._index is None else int(self._index.ntotal)


def _remove_older(directory: Path, stamp: tuple[str, int], *, keep: Path | None) -> None:
    """Remove the FAISS files of this database's earlier commits (and ``stamp``'s, but ``keep``).

    A later commit's file is left: a command that reads an older snapshot
    must not remove the file a writer just wrote.
    """
    for other in directory.glob(INDEX_FILE.format(database=stamp[0], commit="*")):
        commit = other.name.split(".")[2]
        if other != keep and (not commit.isdigit() or int(commit) <= stamp[1]):
            other.unlink(missing_ok=True)
