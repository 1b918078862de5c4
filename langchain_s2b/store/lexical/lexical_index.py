"""The lexical child index: BM25 over the leaves' text (tantivy), part of the child index.

Why tantivy: measured on the dev set's 3,586 sentence leaves (build / one
query / replacing 10 leaves), tantivy took 122-170 ms / 0.42 ms / 33 ms,
``bm25s`` 202 ms / 0.11 ms / 204 ms, ``rank-bm25`` 108 ms / 18 ms / 123 ms and
``rank-bm25-rs`` 65 ms / 0.04 ms / 54 ms. Only tantivy updates in place: the
others rebuild the whole index on every change, so their update time grows
with the corpus while tantivy's grows with the change. It also brings its own
on-disk format (no pickle), and it is the maintained engine behind a search
server.

**One analyser.** Text and queries go through :func:`analyze`, whatever the
store: Unicode NFKC and case folding (final ``ς``, ``ß`` fold as the Unicode
standard says; ``İ`` folds to ``i``), then tantivy's regex tokenizer: a run of letters,
marks and digits is a word, and a character of a script written without
spaces (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) is a word of its
own. The tantivy field indexes with that very analyser, and a query's terms
are what the same analyser makes of it, so an indexed word is always found
(Hindi vowel signs stay in their word, a Chinese word is found by its
characters). Every term is an optional clause, so the score is BM25
(k1 = 1.2, b = 0.75).

Where it lives. The lexical index of a retriever's ``FaissIndex`` lives in a
scratch directory of its own (tantivy's files, memory-mapped: the operating
system keeps the pages it reads, the process holds no copy), holds the key of
each leaf but not its text or metadata (the ``FaissIndex`` has them), and is
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
import unicodedata
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.stored import Entry
from langchain_s2b.store.base import first_line
from langchain_s2b.store.lexical.tantivy_files import (
    _META_FILE,
    _check_footer,
    _check_segment,
    _committed_files,
    _field_names,
    engine_errors,
    scratch_directory,
)
from langchain_s2b.store.lexical.top import top_by_key

_KEY = "key"
_SOURCE = "source"
_TEXT = "text"
_BODY = "body"
_META = "meta"
_ANALYZER = "s2b_words"
_LOCKS = (".tantivy-writer.lock", ".tantivy-meta.lock")
_MANAGED = ".managed.json"
_WRITER_HEAP = 15_000_000
"""Bytes of indexing memory for the one writer thread (tantivy's minimum)."""
WORDS = (
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]"
    r"|[\p{L}\p{M}\p{N}]+"
)
"""What one term is (a regular expression, in tantivy's syntax)."""


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError:
        msg = "Hybrid search needs tantivy: pip install tantivy"
        raise ImportError(msg) from None
    return tantivy


@cache
def _analyzer() -> Any:
    tantivy = _tantivy()
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(WORDS))
    return builder.filter(tantivy.Filter.lowercase()).build()


def fold(text: str) -> str:
    """``text`` as the analyser reads it: NFKC, case-folded, lone surrogates as ``?``.

    The dot that case folding leaves on a capital ``İ`` (``i`` + U+0307) goes
    too, so ``İstanbul`` and ``istanbul`` are one word.
    """
    return unicodedata.normalize("NFKC", _well_formed(text)).casefold().replace("i\u0307", "i")


def analyze(text: str) -> list[str]:
    """The terms of ``text``, in order, as the lexical index makes them (text and queries)."""
    terms: list[str] = _analyzer().analyze(fold(text))
    return terms


def query_terms(query: str) -> list[str]:
    """The query's distinct terms, in order."""
    return list(dict.fromkeys(analyze(query)))


def source_of(key: str) -> str:
    """The (generation) source key a leaf key starts with."""
    return key.split("/", 1)[0]


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
    """

    def __init__(self, directory: Path | None = None, *, documents: bool = True) -> None:
        """A new empty index, in memory or in ``directory`` (created, empty)."""
        self.documents = documents
        self.directory = directory
        self._index = _new_index(directory, documents=documents)
        self._schema = self._index.schema
        if directory is not None:
            weakref.finalize(self, shutil.rmtree, directory, True)

    @classmethod
    def scratch(cls, *, documents: bool = False) -> LexicalIndex:
        """A new empty index in a scratch directory of its own (removed with the object)."""
        return cls(scratch_directory(), documents=documents)

    # Writing ----------------------------------------------------------------------

    def add(self, entries: Sequence[Entry]) -> None:
        """Index leaves under their keys (a key already present is replaced); one commit."""
        if entries:
            _add(self._index, entries, replace=True, documents=self.documents)

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
    ) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 as ``(key, score)``, best first (ties by key).

        Ties by key whatever tantivy's own order of equal scores, and only the
        leaves that can come back are read from the stored fields
        (:func:`~langchain_s2b.store.lexical.top.top_by_key`).

        Args:
            query: the query text.
            n: how many.
            sources: only leaves of these source keys (selected before ranking).
            keep: only leaves for which ``keep(key, metadata)`` holds (the
                metadata is ``{}`` when the index keeps none); the search goes
                deeper until ``n`` are kept or no more match.
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

        def read(addresses: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
            doc = searcher.doc
            with engine_errors():  # the key only, unless a ``keep`` reads the metadata
                if keep is None:
                    return [(str(doc(at)[_KEY][0]), {}) for at in addresses]
                return [(str(d[_KEY][0]), _meta_of(d)) for d in map(doc, addresses)]

        return top_by_key(search, read, n, keep, ident=_address)

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
        with engine_errors():
            searcher = self._index.searcher()
            total = searcher.num_docs
            if not total:
                return set()
            hits = searcher.search(_tantivy().Query.all_query(), total).hits
            return {str(searcher.doc(address)[_KEY][0]) for _, address in hits}

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
            index = _new_index(target, documents=self.documents)
            _add(index, self.entries(), replace=False, documents=self.documents)
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
        loaded.directory = scratch
        loaded._index = opened
        _register(opened)
        loaded._schema = opened.schema
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
    """The schemas this module writes (``meta.json``'s ``schema``), without and with documents."""
    found = []
    for documents in (False, True):
        with tempfile.TemporaryDirectory() as where:
            _new_index(Path(where), documents=documents)
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


def _meta_of(doc: Any) -> dict[str, Any]:
    """A stored document's metadata (``{}`` when the index keeps none)."""
    try:
        raw = doc[_META]
    except KeyError:
        return {}
    return dict(json.loads(raw[0])) if raw else {}


def _new_index(path: Path | None = None, *, documents: bool = True) -> Any:
    tantivy = _tantivy()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_KEY, stored=True, tokenizer_name="raw")
    builder.add_text_field(_SOURCE, stored=False, tokenizer_name="raw")
    # BM25 needs no positions; the analysed text is not stored (the original may be)
    builder.add_text_field(_TEXT, stored=False, tokenizer_name=_ANALYZER, index_option="freq")
    if documents:
        builder.add_bytes_field(_BODY, stored=True, indexed=False)
        builder.add_bytes_field(_META, stored=True, indexed=False)
    schema = builder.build()
    index = tantivy.Index(schema) if path is None else tantivy.Index(schema, path=str(path))
    _register(index)
    return index


def _register(index: Any) -> None:
    index.register_tokenizer(_ANALYZER, _analyzer())


def _add(index: Any, entries: Iterable[Entry], *, replace: bool, documents: bool) -> None:
    tantivy = _tantivy()
    writer = index.writer(_WRITER_HEAP, 1)
    make = tantivy.Document
    for key, text, meta in entries:
        if replace:
            writer.delete_documents_by_term(_KEY, key)
        body = _well_formed(text)
        terms = fold(embedded_text(body, meta))  # the leaf's header and context are searched too
        if documents:
            doc = make(
                **{
                    _KEY: key,
                    _SOURCE: source_of(key),
                    _TEXT: terms,
                    _BODY: body.encode("utf-8"),
                    _META: json.dumps(meta, ensure_ascii=False, default=str).encode("utf-8"),
                }
            )
        else:
            doc = make(**{_KEY: key, _SOURCE: source_of(key), _TEXT: terms})
        writer.add_document(doc)
    _commit(index, writer)


def _commit(index: Any, writer: Any) -> None:
    writer.commit()
    writer.wait_merging_threads()
    index.reload()


def _entries(index: Any) -> list[Entry]:
    searcher = index.searcher()
    total = searcher.num_docs
    if not total:
        return []
    hits = searcher.search(_tantivy().Query.all_query(), total).hits
    return sorted(_entry(searcher.doc(address)) for _, address in hits)


def _entry(doc: Any) -> Entry:
    return str(doc[_KEY][0]), bytes(doc[_BODY][0]).decode("utf-8"), json.loads(doc[_META][0])


def _well_formed(text: str) -> str:
    """``text`` with lone surrogates (not encodable, never letters) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _address(address: Any) -> tuple[int, int]:
    """A tantivy document address as a value (its objects compare by identity)."""
    return (address.segment_ord, address.doc)
