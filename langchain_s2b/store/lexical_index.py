"""The lexical child index: BM25 over the leaves' text (tantivy), kept beside the vectors.

Why tantivy: measured on the dev set's 3,586 sentence leaves (build / one
query / replacing 10 leaves), tantivy took 122-170 ms / 0.42 ms / 33 ms,
``bm25s`` 202 ms / 0.11 ms / 204 ms, ``rank-bm25`` 108 ms / 18 ms / 123 ms and
``rank-bm25-rs`` 65 ms / 0.04 ms / 54 ms. Only tantivy updates in place: the
others rebuild the whole index on every change, so their update time grows
with the corpus while tantivy's grows with the change. It also brings its own
on-disk format (no pickle), and it is the maintained engine behind a search
server; ``rank-bm25-rs`` is a one-month-old 0.1 release, ``rank-bm25`` has not
had a release since 2022 and is pure Python at query time.

Text is analysed by tantivy's default tokenizer (split on anything that is
not a letter or a digit, lower-cased); the query is split the same way and
every term is an optional clause, so the score is BM25 (k1 = 1.2, b = 0.75).
The index lives in memory (a commit to disk costs an ``fsync``, ~70 ms per
add; in memory ~6 ms). :meth:`LexicalIndex.save` writes tantivy's own files
into a directory, :meth:`LexicalIndex.load` reads them back into memory from a
scratch copy, so a saved snapshot is never written to.
"""

from __future__ import annotations

import gc
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

_KEY = "key"
_TEXT = "text"
_LOCKS = (".tantivy-writer.lock", ".tantivy-meta.lock")
_TERM = re.compile(r"[^\W_]+")
_WRITER_HEAP = 15_000_000
"""Bytes of indexing memory for the one writer thread (tantivy's minimum)."""


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError:
        msg = "Hybrid search needs tantivy: pip install tantivy"
        raise ImportError(msg) from None
    return tantivy


def query_terms(query: str) -> list[str]:
    """The query's terms as the index's tokenizer makes them (distinct, in order)."""
    return list(dict.fromkeys(_TERM.findall(_well_formed(query).lower())))


class LexicalIndex:
    """BM25 search over leaf texts by key; add, delete, search, save, load."""

    def __init__(self) -> None:
        """A new empty index, in memory."""
        self._index = _new_index()
        self._schema = self._index.schema

    # Writing ----------------------------------------------------------------------

    def add(self, leaves: Sequence[Document]) -> None:
        """Index leaves under their ids (a key already present is replaced)."""
        self._write([(str(leaf.id), leaf.page_content) for leaf in leaves])

    def delete(self, keys: Sequence[str]) -> None:
        """Remove leaves by key; keys it does not hold are ignored."""
        if not keys:
            return
        writer = self._index.writer(_WRITER_HEAP, 1)
        for key in keys:
            writer.delete_documents_by_term(_KEY, key)
        _commit(self._index, writer)

    def _write(self, pairs: Sequence[tuple[str, str]]) -> None:
        if pairs:
            _add(self._index, pairs, replace=True)

    # Reading ----------------------------------------------------------------------

    def search(self, query: str, n: int) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 as ``(key, score)``, best first (ties by key)."""
        terms = query_terms(query)
        if not terms or n < 1:
            return []
        tantivy = _tantivy()
        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, _TEXT, term))
            for term in terms
        ]
        searcher = self._index.searcher()
        found = searcher.search(tantivy.Query.boolean_query(clauses), n).hits
        pairs = [(str(searcher.doc(address)[_KEY][0]), float(score)) for score, address in found]
        return sorted(pairs, key=lambda pair: (-pair[1], pair[0]))

    def items(self) -> list[tuple[str, str]]:
        """Every ``(key, text)`` held, by key."""
        return _items(self._index)

    def keys(self) -> set[str]:
        """Every key held."""
        return {key for key, _ in self.items()}

    def __len__(self) -> int:
        return int(self._index.searcher().num_docs)

    # Files -----------------------------------------------------------------------

    def save(self, directory: str | Path) -> list[str]:
        """Write tantivy's files into ``directory`` (created, empty); returns their names."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=False)
        index = _new_index(target)
        _add(index, self.items(), replace=False)
        for lock in _LOCKS:
            (target / lock).unlink(missing_ok=True)
        return sorted(p.name for p in target.iterdir() if p.is_file())

    @classmethod
    def load(cls, directory: str | Path) -> LexicalIndex:
        """The index saved in ``directory``, read into memory (the directory is not changed)."""
        source = Path(directory)
        if not (source / "meta.json").is_file():
            msg = f"{source} holds no lexical index (no meta.json); was it saved by save()?"
            raise ValueError(msg)
        loaded = cls()
        # tantivy writes lock files where it opens an index, so it reads a scratch copy (the
        # snapshot's files keep their checksums). Its handles are dropped before the copy is
        # removed: tantivy may still hold a lock file while the object lives.
        scratch = Path(tempfile.mkdtemp(prefix="s2b-lexical-"))
        try:
            for item in source.iterdir():
                if item.is_file() and item.name not in _LOCKS:
                    shutil.copy2(item, scratch / item.name)
            saved = _tantivy().Index.open(str(scratch))
            items = _items(saved)
            del saved
            gc.collect()
            loaded._write(items)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return loaded


def _new_index(path: Path | None = None) -> Any:
    tantivy = _tantivy()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_KEY, stored=True, tokenizer_name="raw")
    builder.add_text_field(_TEXT, stored=True, index_option="freq")  # BM25 needs no positions
    schema = builder.build()
    return tantivy.Index(schema) if path is None else tantivy.Index(schema, path=str(path))


def _add(index: Any, pairs: Sequence[tuple[str, str]], *, replace: bool) -> None:
    tantivy = _tantivy()
    writer = index.writer(_WRITER_HEAP, 1)
    for key, text in pairs:
        if replace:
            writer.delete_documents_by_term(_KEY, key)
        writer.add_document(tantivy.Document(**{_KEY: key, _TEXT: _well_formed(text)}))
    _commit(index, writer)


def _commit(index: Any, writer: Any) -> None:
    writer.commit()
    writer.wait_merging_threads()
    index.reload()


def _items(index: Any) -> list[tuple[str, str]]:
    searcher = index.searcher()
    total = searcher.num_docs
    if not total:
        return []
    hits = searcher.search(_tantivy().Query.all_query(), total).hits
    docs = [searcher.doc(address) for _, address in hits]
    return sorted((str(d[_KEY][0]), str(d[_TEXT][0])) for d in docs)


def _well_formed(text: str) -> str:
    """``text`` with lone surrogates (not encodable, never letters) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")
