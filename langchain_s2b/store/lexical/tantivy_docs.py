"""The tantivy documents of a lexical index: its fields, its schema, and its writes.

A leaf is one document: its key (stored, and a term to delete it by), its
source key (a term, to select sources), the analysed words of its text (BM25,
no positions), optionally its text and metadata (stored), and optionally its
row in a ``FaissIndex`` (a fast field: a column read without the stored
documents; issue 34).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.stored import Entry
from langchain_s2b.store.lexical.analyzer import (
    _ANALYZER,
    _analyzer,
    _tantivy,
    _well_formed,
    fold,
    source_of,
)

_KEY = "key"
_SOURCE = "source"
_TEXT = "text"
_BODY = "body"
_META = "meta"
_ROW = "row"
"""A numeric column (a tantivy fast field) of each leaf's row in its ``FaissIndex``."""
_WRITER_HEAP = 15_000_000
"""Bytes of indexing memory for the one writer thread (tantivy's minimum)."""


def _meta_of(doc: Any) -> dict[str, Any]:
    """A stored document's metadata (``{}`` when the index keeps none)."""
    try:
        raw = doc[_META]
    except KeyError:
        return {}
    return dict(json.loads(raw[0])) if raw else {}


def _new_index(path: Path | None = None, *, documents: bool = True, rows: bool = False) -> Any:
    tantivy = _tantivy()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(_KEY, stored=True, tokenizer_name="raw")
    builder.add_text_field(_SOURCE, stored=False, tokenizer_name="raw")
    # BM25 needs no positions; the analysed text is not stored (the original may be)
    builder.add_text_field(_TEXT, stored=False, tokenizer_name=_ANALYZER, index_option="freq")
    if documents:
        builder.add_bytes_field(_BODY, stored=True, indexed=False)
        builder.add_bytes_field(_META, stored=True, indexed=False)
    if rows:
        builder.add_unsigned_field(_ROW, stored=False, indexed=False, fast=True)
    schema = builder.build()
    index = tantivy.Index(schema) if path is None else tantivy.Index(schema, path=str(path))
    _register(index)
    return index


def _register(index: Any) -> None:
    index.register_tokenizer(_ANALYZER, _analyzer())


def _add(
    index: Any,
    entries: Iterable[Entry],
    *,
    replace: bool,
    documents: bool,
    rows: Sequence[int] | None = None,
) -> None:
    tantivy = _tantivy()
    writer = index.writer(_WRITER_HEAP, 1)
    make = tantivy.Document
    for i, (key, text, meta) in enumerate(entries):
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
        if rows is not None:
            doc.add_unsigned(_ROW, int(rows[i]))
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


def _address(address: Any) -> tuple[int, int]:
    """A tantivy document address as a value (its objects compare by identity)."""
    return (address.segment_ord, address.doc)
