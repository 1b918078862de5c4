"""A ``FaissIndex``'s own BM25 index: built from its records, kept with its rows, checked.

The lexical index keeps each leaf's key and its row (a tantivy fast field), so
a search reads its hits' keys from the records by row, in one pass, and never
one stored document per hit (issue 34). It is written in the same steps as the
vectors and records (:mod:`~langchain_s2b.store.vectors.faiss_writes`).
"""

from __future__ import annotations

import numpy as np

from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.vectors.faiss_base import FaissBase
from langchain_s2b.store.vectors.records import Place, Records

Located = dict[str, tuple[int, Place | None]]
"""Key -> its row and place, as ``FaissIndex.node_rows`` gives them."""


class FaissLexical(FaissBase):
    """The lexical index part of :class:`~langchain_s2b.store.vectors.FaissIndex`."""

    def lexical(self) -> LexicalIndex:
        """The BM25 index of the leaves' text; built from the records on first use.

        Kept in step with every add and delete from then on, under this index's
        lock, so every retriever that shares this index shares it too.
        """
        with self._lock:
            if self._lexical is None:
                self._lexical = self._built_from_records()
            return self._lexical

    def _built_from_records(self) -> LexicalIndex:
        """A new lexical index of the live rows, with the row column (the current one stays)."""
        lexical = LexicalIndex.scratch(documents=False, rows=True)
        held = self._rows
        found = [(row, held.record(row)) for row in held.live_rows().tolist()]
        pairs = [(row, record) for row, record in found if record is not None]
        lexical.add([record for _, record in pairs], [row for row, _ in pairs])
        return lexical

    def rebuild_lexical(self) -> None:
        """Build the lexical index again from the records (``verify(repair=True)``).

        The new one is built whole before it replaces the old (a failure keeps the old).
        """
        with self._lock:
            self._lexical = self._built_from_records()

    def built_lexical(self) -> LexicalIndex | None:
        """The lexical index if it was built, else ``None``."""
        return self._lexical

    def lexical_to_save(self) -> LexicalIndex | None:
        """The lexical index a save writes (``None``: none was built).

        One adopted from a save made before the row column (issue 34: its
        hits are read by stored key) is built again from the records first,
        once, so the next load reads BM25's keys by row.
        """
        with self._lock:
            if self._lexical is not None and not self._lexical.rows:
                self._lexical = self._built_from_records()
            return self._lexical

    def adopt_lexical(self, lexical: LexicalIndex) -> None:
        """Use a lexical index read from a save (with this index: as many leaves, checksummed).

        ``verify`` compares its keys (and rows) with the leaves one by one. One
        whose rows were numbered again at load (:meth:`Records.read`) is not
        used: it is built again from the records on first use. A row column
        whose count, least, greatest and sum are not the rows' is a damaged
        save (one ``ValueError`` line): BM25's hits would name other leaves.
        """
        with self._lock:
            if len(lexical) != len(self._rows) or (lexical.rows and self._renumbered):
                return
            stats = lexical.row_stats()
            live = self._rows.live_rows()
            want = (
                (len(live), int(live.min()), int(live.max()), int(live.sum()))
                if len(live)
                else (0, 0, 0, 0)
            )
            exact = 4 if want[3] < 1 << 53 else 3  # a double holds the sum exactly below 2**53
            if stats is not None and stats[:exact] != want[:exact]:
                msg = (
                    f"The saved lexical index's row column (count, min, max, sum {stats}) is not "
                    f"the child index's rows ({want}): the save is damaged; restore a good copy "
                    "or build the index again."
                )
                raise ValueError(msg)
            self._lexical = lexical

    def lexical_keys(self) -> set[str]:
        """Every key the lexical index holds whose row (when it keeps rows) is the key's row.

        A key kept with another row is left out, so ``verify`` reports it
        missing and ``verify(repair=True)`` builds the index again.
        """
        pairs = self.lexical().key_rows()
        with self._lock:
            held = self._rows
            return {key for key, row in pairs.items() if row is None or held.row(key) == row}

    def keys_of_rows(self, rows: list[int], located: Located | None = None) -> list[str | None]:
        """The key of each row (``None``: not a live row), for a lexical search's hits.

        ``located``: also filled with each key's row and place, as
        :meth:`~langchain_s2b.store.vectors.FaissIndex.node_rows` gives them.
        """
        with self._lock:
            held = self._rows
            if not isinstance(held, Records):
                keys = [None if row < 0 else held.key(row) for row in rows]
                places: list[Place | None] = [None] * len(rows)
            else:
                at = np.asarray(rows, dtype=np.int64)
                places = held.node_places(at)
                keys = held.keys_of(at, places)
            if located is not None and None not in keys:  # every row live (the usual answer)
                located.update(zip(keys, zip(rows, places, strict=True), strict=True))  # type: ignore[arg-type]
            elif located is not None:
                found = zip(keys, rows, places, strict=True)
                located.update((key, (row, place)) for key, row, place in found if key is not None)
            return keys
