"""The lexical child index: BM25 over the leaves' text (tantivy), part of the child index.

Why tantivy: measured on the dev set's 3,586 sentence leaves (build / one
query / replacing 10 leaves), tantivy took 122-170 ms / 0.42 ms / 33 ms,
``bm25s`` 202 ms / 0.11 ms / 204 ms, ``rank-bm25`` 108 ms / 18 ms / 123 ms and
``rank-bm25-rs`` 65 ms / 0.04 ms / 54 ms. Only tantivy updates in place: the
others rebuild the whole index on every change, so their update time grows
with the corpus while tantivy's grows with the change. It also brings its own
on-disk format (no pickle), and it is the maintained engine behind a search
server.

**One analyser** (:mod:`~langchain_s2b.store.lexical.analyzer`) for text and
queries; every term is an optional clause, so the score is BM25 (k1 = 1.2, b = 0.75).

Where it lives. The lexical index of a retriever's ``FaissIndex`` lives in a
scratch directory of its own (tantivy's files, memory-mapped: the operating
system keeps the pages it reads, the process holds no copy), holds the key of
each leaf and its row but not its text or metadata (the ``FaissIndex`` has them), and is
committed with every write (~15 ms on this machine's disk, ~6 ms in memory).
:meth:`LexicalIndex.save` copies its files; :meth:`LexicalIndex.load` copies
saved files into a new scratch directory and opens them there, as they are:
nothing is indexed again, and the snapshot is never written to. The lexical
index of any other child store is built in memory from the docstore and keeps
each leaf's text and metadata (for its filters and for undoing a delete).

What is indexed for a leaf is its text with its contextual header and
model-written context, when its metadata has them
(:func:`~langchain_s2b.core.headers.embedded_text`); what is kept is its text.
"""

from __future__ import annotations

import gc
import json
import shutil
import tempfile
import weakref
from collections.abc import Callable, Collection, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from langchain_s2b.core.stored import Entry
from langchain_s2b.store.base import first_line
from langchain_s2b.store.lexical.analyzer import (
    _tantivy,
    query_terms,
)
from langchain_s2b.store.lexical.tantivy_docs import (
    _BODY,
    _KEY,
    _META,
    _ROW,
    _SOURCE,
    _TEXT,
    _WRITER_HEAP,
    _add,
    _address,
    _commit,
    _entries,
    _entry,
    _meta_of,
    _new_index,
    _register,
)
from langchain_s2b.store.lexical.tantivy_files import (
    _META_FILE,
    _check_footer,
    _check_segment,
    _committed_files,
    _field_names,
    engine_errors,
    scratch_directory,
)
from langchain_s2b.store.lexical.top import FirstDepth, top_by_key

_LOCKS = (".tantivy-writer.lock", ".tantivy-meta.lock")
_MANAGED = ".managed.json"


class Lexical(Protocol):
    """What the child index needs of a lexical index, in whatever engine it lives."""

    def add(self, entries: Sequence[Entry]) -> None:
        """Index leaves under their keys (replacing), in one commit."""

    def delete(self, keys: Sequence[str]) -> None:
        """Remove leaves by key, in one commit."""

    def search(
        self,
        query: str,
        n: int,
        *,
        sources: Collection[str] | None = None,
        keep: Callable[[str, dict[str, Any]], bool] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``n`` best leaves that pass, best first."""

    def entries(self, keys: Collection[str] | None = None) -> list[Entry]:
        """Every leaf held (of ``keys``, if given)."""

    def items(self) -> list[tuple[str, str]]:
        """Every ``(key, text)`` held."""

    def keys(self) -> set[str]:
        """Every key held."""

    def __len__(self) -> int: ...


class LexicalIndex:
    """BM25 search over leaf texts by key: add, delete, search (filtered), save, load.

    Args:
        directory: where its files live (``None``: in memory). The directory is
            removed with the object (or at exit).
        documents: also keep each leaf's text and metadata (``entries``, a
            ``keep`` filter on metadata); without them only keys are stored.
        rows: also keep each leaf's row in its ``FaissIndex`` (given to
            :meth:`add`), read back by a search in one columnar read instead of
            each leaf's stored key (:meth:`search`'s ``key_of``; issue 34).
    """

    def __init__(
        self, directory: Path | None = None, *, documents: bool = True, rows: bool = False
    ) -> None:
        """A new empty index, in memory or in ``directory`` (created, empty)."""
        self.documents = documents
        self.rows = rows
        self.directory = directory
        self._index = _new_index(directory, documents=documents, rows=rows)
        self._schema = self._index.schema
        self._first = FirstDepth()  # how deep a search goes first (learnt from its ties)
        if directory is not None:
            weakref.finalize(self, shutil.rmtree, directory, True)

    @classmethod
    def scratch(cls, *, documents: bool = False, rows: bool = False) -> LexicalIndex:
        """A new empty index in a scratch directory of its own (removed with the object)."""
        return cls(scratch_directory(), documents=documents, rows=rows)

    # Writing ----------------------------------------------------------------------

    def add(self, entries: Sequence[Entry], rows: Sequence[int] | None = None) -> None:
        """Index leaves under their keys (a key already present is replaced); one commit.

        ``rows``: each leaf's row, which an index that keeps rows needs (and
        any other ignores).
        """
        if self.rows and (rows is None or len(rows) != len(entries)):
            got = "none" if rows is None else len(rows)
            msg = f"This lexical index keeps rows: add() needs {len(entries)} rows; got {got}."
            raise ValueError(msg)
        if entries:
            kept = rows if self.rows else None
            _add(self._index, entries, replace=True, documents=self.documents, rows=kept)

    def delete(self, keys: Sequence[str]) -> None:
        """Remove leaves by key, in one commit; keys it does not hold are ignored."""
        if not keys:
            return
        writer = self._index.writer(_WRITER_HEAP, 1)
        for key in keys:
            writer.delete_documents_by_term(_KEY, key)
        _commit(self._index, writer)

    def clear(self) -> None:
        """Remove every leaf, in one commit."""
        writer = self._index.writer(_WRITER_HEAP, 1)
        writer.delete_all_documents()
        _commit(self._index, writer)

    # Reading ----------------------------------------------------------------------

    def search(
        self,
        query: str,
        n: int,
        *,
        sources: Collection[str] | None = None,
        keep: Callable[[str, dict[str, Any]], bool] | None = None,
        key_of: Callable[[list[int]], list[str | None]] | None = None,
    ) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 as ``(key, score)``, best first (ties by key).

        Ties by key whatever tantivy's own order of equal scores, and only the
        leaves that can come back are read
        (:func:`~langchain_s2b.store.lexical.top.top_by_key`): from the stored
        fields, or in an index that keeps rows, given ``key_of`` (rows -> their
        keys, ``None`` for one it does not know), from the row column at once.

        Args:
            query: the query text.
            n: how many.
            sources: only leaves of these source keys (selected before ranking).
            keep: only leaves for which ``keep(key, metadata)`` holds (the
                metadata is ``{}`` when the index keeps none); the search goes
                deeper until ``n`` are kept or no more match.
            key_of: the keys of rows (see above); a row it does not know is
                read from the stored fields.
        """
        terms = query_terms(query)
        if not terms or n < 1 or (sources is not None and not sources):
            return []
        tantivy = _tantivy()
        schema = self._schema
        words = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, _TEXT, t)) for t in terms]
        )
        q = words
        if sources is not None:
            only = tantivy.Query.term_set_query(schema, _SOURCE, sorted(sources))
            q = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, words),
                    (tantivy.Occur.Must, tantivy.Query.const_score_query(only, 0.0)),
                ]
            )
        with engine_errors():
            searcher = self._index.searcher()  # one snapshot for every round

        def search(depth: int) -> list[tuple[float, Any]]:
            with engine_errors():
                return searcher.search(q, depth).hits  # type: ignore[no-any-return]

        by_row = key_of is not None and self.rows and keep is None

        def read(addresses: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
            doc = searcher.doc
            with engine_errors():  # the key only, unless a ``keep`` reads the metadata
                if by_row and key_of is not None:
                    rows = searcher.fast_field_values(_ROW, list(addresses))  # ints (i64)
                    if None in rows:  # a leaf of a segment written before the row column
                        rows = [-1 if row is None else int(row) for row in rows]
                    keys = key_of(rows)
                    return [
                        (str(doc(at)[_KEY][0]) if key is None else key, {})
                        for key, at in zip(keys, addresses, strict=True)
                    ]
                if keep is None:
                    return [(str(doc(at)[_KEY][0]), {}) for at in addresses]
                return [(str(d[_KEY][0]), _meta_of(d)) for d in map(doc, addresses)]

        return top_by_key(search, read, n, keep, ident=_address, first=self._first)

    def entries(self, keys: Collection[str] | None = None) -> list[Entry]:
        """Every ``(key, text, metadata)`` held (of ``keys``, if given), by key.

        Only an index that keeps documents has them.
        """
        if not self.documents:
            msg = (
                "This lexical index keeps keys only, not the leaves' text (its child index has it)."
            )
            raise ValueError(msg)
        if keys is None:
            with engine_errors():
                return _entries(self._index)
        if not keys:
            return []
        tantivy = _tantivy()
        only = tantivy.Query.term_set_query(self._schema, _KEY, sorted(keys))
        with engine_errors():
            searcher = self._index.searcher()
            hits = searcher.search(only, len(keys)).hits
            return sorted(_entry(searcher.doc(address)) for _, address in hits)

    def items(self) -> list[tuple[str, str]]:
        """Every ``(key, text)`` held, by key."""
        return [(key, text) for key, text, _ in self.entries()]

    def keys(self) -> set[str]:
        """Every key held."""
        return set(self.key_rows())

    def key_rows(self) -> dict[str, int | None]:
        """Every key held, with its row (``None`` in an index that keeps no rows)."""
        with engine_errors():
            searcher = self._index.searcher()
            total = searcher.num_docs
            if not total:
                return {}
            hits = searcher.search(_tantivy().Query.all_query(), total).hits
            addresses = [address for _, address in hits]
            keys = [str(searcher.doc(address)[_KEY][0]) for address in addresses]
            if not self.rows:
                return dict.fromkeys(keys)
            rows = searcher.fast_field_values(_ROW, addresses)
            return dict(zip(keys, rows, strict=True))

    def row_stats(self) -> tuple[int, int, int, int] | None:
        """``(count, min, max, sum)`` of the row column, from tantivy's own pass over it.

        ``None`` in an index that keeps no rows (and ``(0, 0, 0, 0)`` when it is
        empty): what a load compares with the rows it expects (a damaged
        column passes tantivy's checks when its CRC was written again).
        """
        if not self.rows:
            return None
        with engine_errors():
            found = self._index.searcher().aggregate(
                _tantivy().Query.all_query(), {"r": {"stats": {"field": _ROW}}}
            )["r"]
        if not found["count"]:
            return 0, 0, 0, 0
        return int(found["count"]), int(found["min"]), int(found["max"]), int(found["sum"])

    def __len__(self) -> int:
        with engine_errors():
            return int(self._index.searcher().num_docs)

    # Files -----------------------------------------------------------------------

    def save(self, directory: str | Path) -> list[str]:
        """Write tantivy's files into ``directory`` (created, empty); returns their names.

        An index on disk copies the files of its last commit (``meta.json`` and
        the segments it names) and takes no writer, so saves of one index may
        run at once; one in memory is written again into a new index there.
        """
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=False)
        if self.directory is not None:  # no writer: saves of one index may overlap
            names = _committed_files(self.directory)
            for name in names:
                shutil.copyfile(self.directory / name, target / name)
            managed = json.dumps(sorted(names))  # tantivy's list of the files it may remove
            (target / _MANAGED).write_text(managed + "\n", encoding="utf-8")
        else:
            index = _new_index(target, documents=self.documents, rows=self.rows)
            entries = self.entries()
            rows = None
            if self.rows:
                at = self.key_rows()
                rows = [int(at[key] or 0) for key, _, _ in entries]
            _add(index, entries, replace=False, documents=self.documents, rows=rows)
            del index
            gc.collect()
            for lock in _LOCKS:
                (target / lock).unlink(missing_ok=True)
        return sorted(p.name for p in target.iterdir() if p.is_file())

    @classmethod
    def load(cls, directory: str | Path, *, documents: bool | None = None) -> LexicalIndex:
        """The index saved in ``directory``, opened from a scratch copy of its files.

        Nothing is indexed again: tantivy opens its files as they are (they are
        copied because tantivy writes lock files and new segments where an
        index lives, and a snapshot is never written to). ``documents``:
        whether to keep the leaves' text and metadata from now on (``None``: as
        saved; ``False`` also opens an index saved with them).
        """
        source = Path(directory)
        if not (source / _META_FILE).is_file():
            msg = f"{source} holds no lexical index (no meta.json); was it saved by save()?"
            raise ValueError(msg)
        scratch = scratch_directory()
        try:
            copied = []
            for item in source.iterdir():
                if item.is_file() and item.name not in (*_LOCKS, _MANAGED):
                    shutil.copyfile(item, scratch / item.name)
                    copied.append(item.name)
            (scratch / _MANAGED).write_text(json.dumps(sorted(copied)) + "\n", encoding="utf-8")
            check_files(scratch)  # what tantivy opens: the copies
            opened = _open(scratch, source)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        fields = _field_names(scratch)
        if documents is None:
            documents = {_BODY, _META} <= fields
        needed = {_KEY, _SOURCE, _TEXT} | ({_BODY, _META} if documents else set())
        if not needed <= fields:
            shutil.rmtree(scratch, ignore_errors=True)
            msg = (
                f"{source} holds a lexical index of another format (fields {sorted(fields)}, "
                f"needs {sorted(needed)}); load the retriever with hybrid=False, or save it "
                "again with this version."
            )
            raise ValueError(msg)
        loaded = cls.__new__(cls)
        loaded.documents = documents
        loaded.rows = _ROW in fields
        loaded.directory = scratch
        loaded._index = opened
        _register(opened)
        loaded._schema = opened.schema
        loaded._first = FirstDepth()
        weakref.finalize(loaded, shutil.rmtree, scratch, True)
        return loaded


def check_files(directory: Path) -> None:
    """Check a saved index's files before tantivy opens them; ``ValueError`` naming what is wrong.

    ``meta.json`` must hold this module's schema (with or without the
    documents) and segments whose document counts fit their files, and every
    segment file must end with tantivy's footer, whose CRC-32 of the file's
    body must match (what tantivy's own ``validate_checksum`` checks; the Python
    binding does not offer it). A damaged or crafted segment would otherwise
    reach tantivy, which can panic on it.
    """
    meta_file = directory / _META_FILE
    try:
        meta = json.loads(meta_file.read_bytes())
    except (ValueError, RecursionError) as err:
        msg = f"{meta_file} is not JSON ({str(err).splitlines()[0]})."
        raise ValueError(msg) from None
    if not isinstance(meta, dict) or meta.get("schema") not in _schemas():
        msg = f"{meta_file} does not hold the schema of a langchain_s2b lexical index."
        raise ValueError(msg)
    segments = meta.get("segments")
    if not isinstance(segments, list):
        msg = f"{meta_file}: segments must be a list."
        raise ValueError(msg)
    stems = {_check_segment(directory, segment) for segment in segments}
    if len(stems) != len(segments):
        msg = f"{meta_file} names a segment twice."
        raise ValueError(msg)
    for item in sorted(directory.iterdir()):
        if item.name.partition(".")[0] in stems:
            _check_footer(item)


@cache
def _schemas() -> tuple[Any, ...]:
    """The schemas this module writes (``meta.json``'s ``schema``): with documents, rows or not."""
    found = []
    for documents in (False, True):
        for rows in (False, True):
            with tempfile.TemporaryDirectory() as where:
                _new_index(Path(where), documents=documents, rows=rows)
                found.append(
                    json.loads((Path(where) / _META_FILE).read_text(encoding="utf-8"))["schema"]
                )
    return tuple(found)


def _open(directory: Path, saved: Path) -> Any:
    """``tantivy.Index.open`` with every segment opened; a damaged index is one ``ValueError``."""
    damaged = f"{saved} holds a damaged lexical index"
    try:
        with engine_errors(damaged):
            opened = _tantivy().Index.open(str(directory))
            _register(opened)
            opened.searcher()  # opens every segment
    except OSError as err:
        msg = f"{damaged} ({first_line(err)})."
        raise ValueError(msg) from None
    return opened
