"""The write path of ``FaissIndex``: add, delete, clear, and make FAISS and the records agree.

Every write is all or nothing (see :meth:`FaissWrites._writing`): its steps
(FAISS, the lexical index, the records) each register their undo before they
run, the new rows are written before the rows they replace are removed, and the
records are published last.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import faiss
import numpy as np

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.requests import ChildDamage
from langchain_s2b.store.base import Undo, all_or_nothing
from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.vectors.faiss_base import FaissBase, _contents, _ids_of, normalise
from langchain_s2b.store.vectors.records import Record, Records


class FaissWrites(FaissBase):
    """The write path of :class:`~langchain_s2b.store.vectors.faiss_index.FaissIndex`."""

    def add_vectors(
        self,
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        """Add precomputed vectors; an existing id is replaced.

        An id given twice in one call is added once, with its last vector, text
        and metadata (as if the calls were made one after the other). All or
        nothing (see :meth:`_writing`): the new rows are written before the
        rows they replace are removed, and a failure or an interrupt at any
        step leaves the index as it was.
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        n = len(ids)
        if matrix.ndim != 2 or len(matrix) != n or len(texts) != n or len(metadatas) != n:
            msg = (
                f"Expected {n} vectors as a 2-D array, {n} texts and {n} metadata dicts; got "
                f"shape {matrix.shape}, {len(texts)} texts and {len(metadatas)} metadata dicts."
            )
            raise ValueError(msg)
        last = {key: i for i, key in enumerate(ids)}
        if len(last) != len(ids):
            keep = sorted(last.values())
            matrix = matrix[keep]
            texts = [texts[i] for i in keep]
            metadatas = [metadatas[i] for i in keep]
            ids_given, ids = ids, [ids[i] for i in keep]
        else:
            ids_given = ids
        if not np.isfinite(matrix).all():
            msg = "The embedding returned NaN or infinite values; refusing to index them."
            raise ValueError(msg)
        with self._lock:
            self._ensure_index(matrix.shape[1])
            self._check_writable()
            self._tidy()
            old = list(dict.fromkeys(row for row in map(self._rows.row, ids) if row >= 0))
            replaced = self._held_records(old)
            rows = np.arange(self._next_id, self._next_id + len(ids), dtype=np.int64)
            self._next_id += len(ids)  # never given out again, whatever happens below
            entries = list(zip(ids, texts, metadatas, strict=True))
            with self._writing() as steps:
                index, moved = self._add_to_faiss(steps, normalise(matrix), rows)
                self._remove_from_faiss(steps, index, old)
                self._add_text(steps, entries, rows.tolist(), replaced, old)
                self._remove_records(steps, old, replaced)
                self._add_records(steps, rows.tolist(), entries)
                if moved:
                    self._staging = None
            self._forget(old)
        return list(ids_given)

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and add texts under ``ids`` (required: children have keys).

        What is embedded is a leaf's text with its header and context
        (:func:`~langchain_s2b.core.headers.embedded_text`); what is kept is its text.
        """
        texts = list(texts)
        if ids is None or len(ids) != len(texts):
            msg = "FaissIndex.add_texts needs one id per text (the child node keys)."
            raise ValueError(msg)
        if not texts:
            return []
        metas = metadatas or [{} for _ in texts]
        embedded = [embedded_text(t, m) for t, m in zip(texts, metas, strict=False)]
        vectors = np.asarray(self.embedding.embed_documents(embedded), dtype=np.float32)
        return self.add_vectors(vectors, texts, metas, ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove vectors by key (``None``: all of them); unknown keys are ignored.

        Returns whether any vector went. All or nothing, like :meth:`add_vectors`.
        """
        with self._lock:
            self._check_writable()
            if ids is None:
                return self._clear()
            rows = list(dict.fromkeys(row for row in map(self._rows.row, ids) if row >= 0))
            if not rows:
                return False
            self._tidy()
            held = self._held_records(rows)
            with self._writing() as steps:
                self._remove_text(steps, rows, held)
                self._remove_from_faiss(steps, self._active(), rows)
                self._remove_records(steps, rows, held)
            self._forget(rows)
        return True

    # One write, step by step ------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Undo]:
        """One write of several steps: all of them, or none.

        Each step registers its undo before it runs (the undo works whether
        the step ran or not: an interrupt may land just before or just after
        FAISS or tantivy returns). On any ``BaseException`` (an error, Ctrl-C,
        a cancellation) the undos run backwards and the exception goes on up.
        The rows are published last (:meth:`_add_records`): until then no
        search or listing sees the write.
        """
        try:
            with all_or_nothing() as undo:
                yield undo
        finally:
            self._version += 1

    def _add_to_faiss(self, steps: Undo, vectors: np.ndarray, rows: np.ndarray) -> tuple[Any, bool]:
        """Add vectors under new rows: the index now holding them, and whether staging ended.

        While an IVF/PQ index waits for enough vectors to train on, they are
        staged in an exact index; the add that brings enough trains it on all
        of them and moves them in (the staged vectors stay staged until the
        write is done, so its undo only empties the index).
        """
        staging = self._staging
        if staging is not None and staging.ntotal + len(rows) >= self._wanted_training():
            staged_rows, staged = _contents(staging)
            vectors = np.concatenate([staged, vectors]) if len(staged_rows) else vectors
            rows = np.concatenate([staged_rows, rows])
            index = self._index
            steps.then(index.reset)  # keeps the training
            self._train(vectors)
            index.add_with_ids(vectors, rows)
            return index, True
        index = self._active()
        before = int(index.ntotal)
        steps.then(lambda: self._unadd(index, rows, before))
        index.add_with_ids(vectors, rows)
        return index, False

    def _unadd(self, index: Any, rows: np.ndarray, before: int) -> None:
        """Undo :meth:`_add_to_faiss` (FAISS adds all or nothing: its count says which)."""
        if int(index.ntotal) == before:
            return
        if _removable(index):
            index.remove_ids(rows)
        else:
            self._dead.update(rows.tolist())

    def _remove_from_faiss(self, steps: Undo, index: Any, rows: list[int]) -> None:
        """Remove rows' vectors where FAISS can (kept, to be put back), else make tombstones."""
        if not rows or index is None:
            return
        if not _removable(index):
            fresh = [row for row in rows if row not in self._dead]
            steps.then(lambda: self._dead.difference_update(fresh))
            self._dead.update(fresh)
            return
        held, vectors = _held_vectors(index, np.asarray(rows, dtype=np.int64))
        before = int(index.ntotal)

        def put_back() -> None:
            if int(index.ntotal) != before and len(held):
                index.add_with_ids(vectors, held)

        steps.then(put_back)
        index.remove_ids(np.asarray(rows, dtype=np.int64))

    def _add_text(
        self,
        steps: Undo,
        entries: list[Record],
        rows: list[int],
        replaced: list[Record | None],
        old: list[int],
    ) -> None:
        """Write the leaves' text into the lexical index, once it is built (replacing).

        ``rows``: the entries' rows; ``replaced``: the records of the ``old`` rows.
        """
        lexical = self._lexical
        if lexical is None or not entries:
            return

        def undo() -> None:
            lexical.delete([key for key, _, _ in entries])
            back = [(r, found) for r, found in zip(old, replaced, strict=True) if found is not None]
            if back:
                lexical.add([found for _, found in back], [row for row, _ in back])

        steps.then(undo)
        lexical.add(entries, rows)

    def _remove_text(self, steps: Undo, rows: list[int], held: list[Record | None]) -> None:
        """Remove rows' leaves from the lexical index, once it is built (put back on a failure)."""
        lexical = self._lexical
        if lexical is None or not rows:
            return
        back = [(row, found) for row, found in zip(rows, held, strict=True) if found is not None]
        steps.then(lambda: lexical.add([found for _, found in back], [row for row, _ in back]))
        lexical.delete([key for key in map(self._rows.key, rows) if key is not None])

    def _add_records(self, steps: Undo, rows: list[int], entries: list[Record]) -> None:
        """Publish the new rows: their keys now name them (the last step of a write)."""

        def undo() -> None:
            live = [row for row in rows if self._rows.key(row) is not None]
            if live:
                self._rows.remove(live)

        steps.then(undo)
        keys, texts, metas = zip(*entries, strict=True)
        self._rows.add(rows, keys, texts, metas)

    def _remove_records(self, steps: Undo, rows: list[int], held: list[Record | None]) -> None:
        """Remove rows from the records (added again, from ``held``, on a failure)."""
        if not rows:
            return

        def undo() -> None:
            gone = [
                (row, found)
                for row, found in zip(rows, held, strict=True)
                if found is not None and self._rows.key(row) is None
            ]
            if gone:
                keys, texts, metas = zip(*(found for _, found in gone), strict=True)
                self._rows.add([row for row, _ in gone], keys, texts, metas)

        steps.then(undo)
        self._rows.remove(rows)

    def _held_records(self, rows: list[int]) -> list[Record | None]:
        """``(key, text, metadata)`` of rows, to put back if a write fails.

        ``None`` for a row whose record can not be read whole (a database
        leaf whose node went first, as a repair removes orphans): it can not
        be put back, and its removal is not undone.
        """
        if not rows:
            return []
        try:
            return self._rows.records(rows)
        except LookupError:
            return [self._record_or_none(row) for row in rows]

    def _record_or_none(self, row: int) -> Record | None:
        try:
            return self._rows.record(row)
        except LookupError:
            return None

    def _forget(self, rows: list[int]) -> None:
        """What was read from rows that are gone."""
        for row in rows:
            self._parsed.pop(row, None)

    def _check_writable(self) -> None:
        """Hook for an index opened read-only (memory-mapped): refuse a write in one line."""

    def _tidy(self) -> None:
        """Before a write: rebuild without the tombstones once they are a quarter of the index.

        Searches leave tombstones out meanwhile; the rebuild changes nothing a
        search sees, and comes before the write so that it can not fail one.
        """
        if len(self._dead) >= max(64, len(self._rows) // 4):
            self._compact()

    def _clear(self) -> bool:
        """Remove every row: the lexical index and records first, FAISS (no undo) last."""
        had = bool(len(self._rows))
        rows, lexical = self._rows, self._lexical
        with self._writing() as steps:
            if lexical is not None:
                steps.then(lambda: setattr(self, "_lexical", lexical))
                self._lexical = LexicalIndex.scratch(documents=False, rows=True)
            if isinstance(rows, Records):
                steps.then(lambda: setattr(self, "_rows", rows))
                self._rows = Records()
            else:  # rows in a database: its transaction undoes them
                rows.clear()
            for index in (self._index, self._staging):
                if index is not None:
                    index.reset()
            self._dead = set()
            self._parsed.clear()
        return had

    # The records and FAISS agree (``verify``) ------------------------------------------

    def damage(self) -> ChildDamage:
        """Where the records and FAISS disagree (an interrupted write whose undo failed).

        The keys whose row FAISS does not hold, and how many vectors FAISS
        holds for no row (tombstones are not vectors of the index).
        """
        with self._lock:
            live, held = self._rows.live_rows(), self._held_rows()
            unindexed = live[~np.isin(live, held)].tolist()
            stray = int((~np.isin(held, live)).sum())
            keys = [key for key in map(self._rows.key, unindexed) if key is not None]
        return ChildDamage(sorted(keys), stray)

    def mend(self) -> None:
        """Make the records and FAISS agree: drop rows without a vector, vectors without a row.

        A dropped row's key leaves the lexical index too; ``verify(repair=True)``
        then indexes its source again.
        """
        with self._lock:
            self._check_writable()
            index = self._active()
            if index is not None:
                self._dead.intersection_update(_ids_of(index).tolist())
            live, held = self._rows.live_rows(), self._held_rows()
            stray = np.unique(held[~np.isin(held, live)]).tolist()
            unindexed = live[~np.isin(live, held)].tolist()
            lost = self._held_records(unindexed)
            with self._writing() as steps:
                self._remove_from_faiss(steps, index, stray)
                self._remove_text(steps, unindexed, lost)
                self._remove_records(steps, unindexed, lost)
            self._forget(unindexed)

    def _held_rows(self) -> np.ndarray:
        """The rows FAISS holds a vector for, tombstones left out."""
        index = self._active()
        if index is None:
            return np.zeros(0, dtype=np.int64)
        held = _ids_of(index)
        if index is self._index and self._dead:
            held = held[~np.isin(held, np.fromiter(self._dead, dtype=np.int64))]
        return held


def _removable(index: Any) -> bool:
    """Whether FAISS removes vectors from ``index`` and renumbers the rest (flat codes)."""
    return isinstance(faiss.downcast_index(index.index), faiss.IndexFlatCodes)


def _held_vectors(index: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows among ``rows`` that ``index`` holds, and their stored vectors."""
    try:
        return rows, np.asarray(index.reconstruct_batch(rows), dtype=np.float32)
    except RuntimeError:  # a row it does not hold (damage): look them up
        held = rows[np.isin(rows, _ids_of(index))]
        if not len(held):
            return held, np.zeros((0, int(index.d)), dtype=np.float32)
        return held, np.asarray(index.reconstruct_batch(held), dtype=np.float32)
