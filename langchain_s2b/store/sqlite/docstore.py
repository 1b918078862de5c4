"""One SQLite database for a whole index: nodes, manifests, child vectors, in one transaction.

The ``s2b`` command keeps its index in one file (``DIR/s2b.sqlite``). Why a
small ``BaseStore`` over :mod:`sqlite3` and not LangChain's ``SQLStore``: a
``SQLStore`` keeps one opaque value per key, so every node would repeat the
text of its span and its source's metadata (the document, its sections, its
paragraphs and its sentences each hold the same characters: four copies). Here
a node whose text is a slice of its source document is stored as ``(start,
end)`` and the metadata it shares with the document is stored once, so the
text is on disk once. Every stored form is decoded and compared with the
document before it is written; anything that would not come back equal is kept
whole (foreign documents, manifests).

Consistency: the docstore (:class:`SQLiteDocStore`), the child index
(:class:`SQLiteFaissIndex`: the ``children`` table gives each leaf key its row
number, its FAISS id, and its vector; the ``lexical`` FTS5 table its terms) and
the vectors share one connection, so a writer's transaction
(:meth:`Database.write`) commits nodes, manifests, child vectors and terms
together or not at all. The FAISS index of a commit is a file named after the
database's commit counter (:func:`index_file`), read by every command that
reads that state (one read transaction, a WAL snapshot, so a reader never sees
half a write); it is built from the ``children`` and ``vectors`` tables only
when there is no file for that state.

Vectors are content-addressed (SHA-256 of the embedded text: a leaf's text
with its contextual header and context, when it has them,
:func:`~langchain_s2b.core.headers.embedded_text`; :class:`CachedEmbeddings`):
turning headers on embeds each leaf once more, turning them off again reuses
the vectors kept; a passage that was embedded once, for a file that
moved, for a copy, or before Ctrl-C, is never embedded again. Each vector row
also keeps a digest of its bytes (:func:`vector_digest`), so that
:func:`find_damage` can tell a vector whose bytes changed on disk.

Damage: a row whose bytes no longer decode is read as absent (``mget`` gives
``None``; :attr:`SQLiteDocStore.unreadable` names it), and a child whose vector
is absent or unusable is left out of FAISS (:attr:`SQLiteFaissIndex.unrestored`),
so that a damaged store can still be opened, checked and repaired.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.core.keys import is_node_key, node_key, parse_node_key, source_key_of
from langchain_s2b.core.tree import DOC_LEVEL, NODE_FIELDS
from langchain_s2b.store.sqlite.database import Database, chunks, marks

__all__ = ["SQLiteDocStore"]

_marks = marks


# The docstore ---------------------------------------------------------------------------


_OWN_KEY = '"\x01/'
"""Stands for ``"<source key>/`` in a node's own metadata (keys of its parent and ancestors).

``json.dumps`` never writes a raw control character, so the mark can not clash."""


_SHARED = "\x00u"
"""Marks a node whose source metadata is its ``doc`` node's."""
_SHORT = {"parent_id": "p", "ancestors": "a", "children": "c", "source_splits": "n", _SHARED: "u"}
_LONG = {v: k for k, v in _SHORT.items()}


def _enc(text: str) -> bytes:
    """UTF-8 bytes for a BLOB column (lone surrogates survive, as in any Python str)."""
    return text.encode("utf-8", "surrogatepass")


def _dec(data: bytes) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _user_fields(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in NODE_FIELDS}


class SQLiteDocStore(BaseStore[str, Document]):
    """A ``BaseStore[str, Document]`` in the :class:`Database`; each text stored once.

    A node of the span tree (``<source>/<level>/<n>``) whose text is the slice
    ``[start, end)`` of its source's ``doc`` node is a row of ``nodes``: its span
    and the metadata that is its own (its source's metadata is read from the
    ``doc`` node). Everything else (``doc`` nodes, manifests, foreign values) is
    a row of ``docs``, whole. Writes join the caller's transaction when one is
    open (:meth:`Database.write`); alone, each call is its own transaction.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self.unreadable: set[str] = set()
        """Keys of rows read so far whose bytes do not decode (damage); read as absent."""
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        """``doc`` nodes this store wrote in the write transaction :attr:`_written_in`: a
        later batch of their spans is encoded against them without reading the text back."""
        self._written_in = -1
        self.on_put: Callable[[int], object] | None = None
        """Told how many nodes of the span tree each write stored (a command's progress)."""

    # Encoding ------------------------------------------------------------------------

    @staticmethod
    def _slice_row(
        key: str, doc: Document, source: tuple[str, dict[str, Any]] | None
    ) -> tuple[int, int, str] | None:
        """``(start, end, own metadata)`` when ``doc`` is a slice of its source, else None."""
        if source is None or doc.id != key:
            return None
        meta = doc.metadata
        start, end = meta.get("start"), meta.get("end")
        if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool):
            return None
        text, doc_meta = source
        if not 0 <= start <= end <= len(text) or text[start:end] != doc.page_content:
            return None
        parts = parse_node_key(key)
        derived = {
            "source_key": parts.source_key,
            "level": parts.level,
            "split_id": parts.split_id,
            "start": start,
            "end": end,
            "split_idx_start": start,
            "source_id": doc_meta.get("source_id"),
        }
        own = {k: v for k, v in meta.items() if k not in derived or derived[k] != v}
        ancestors = own.get("ancestors")
        if isinstance(ancestors, list) and ancestors and own.get("parent_id") == ancestors[0][0]:
            del own["parent_id"]  # a leaf's parent is its nearest ancestor
        if _user_fields(meta) == _user_fields(doc_meta):
            own = {k: v for k, v in own.items() if k in NODE_FIELDS}
            own[_SHARED] = 1
        short = {_SHORT.get(k, k): v for k, v in own.items()}
        row = (start, end, _dumps(short).replace(f'"{parts.source_key}/', _OWN_KEY))
        if SQLiteDocStore._decode_slice(key, row, source) != doc:
            return None  # it would not come back equal: keep it whole
        return row

    @staticmethod
    def _decode_slice(
        key: str, row: tuple[int, int, str], source: tuple[str, dict[str, Any]]
    ) -> Document:
        start, end, own_json = row
        text, doc_meta = source
        parts = parse_node_key(key)
        short = json.loads(own_json.replace(_OWN_KEY, f'"{parts.source_key}/'))
        own = {_LONG.get(k, k): v for k, v in short.items()}
        meta: dict[str, Any] = {}
        if own.pop(_SHARED, None):
            meta.update(_user_fields(doc_meta))
        if "ancestors" in own and "parent_id" not in own and own["ancestors"]:
            own["parent_id"] = own["ancestors"][0][0]
        meta.update(
            {
                "source_id": doc_meta.get("source_id"),
                "source_key": parts.source_key,
                "level": parts.level,
                "split_id": parts.split_id,
                "start": start,
                "end": end,
                "split_idx_start": start,
            }
        )
        meta.update(own)
        return Document(page_content=text[start:end], metadata=meta, id=key)

    def _sources(
        self, keys: Iterable[str], batch: dict[str, tuple[str, dict[str, Any]]] | None = None
    ) -> dict[str, tuple[str, dict[str, Any]]]:
        """``doc`` node key -> (text, metadata), from ``batch`` first, then the database."""
        wanted = sorted(set(keys) - set(batch or {}))
        found = dict(batch or {})
        for part in chunks(wanted):
            sql = f"SELECT key, text, meta FROM docs WHERE key IN ({_marks(len(part))})"  # noqa: S608
            for key, text, meta in self.db.conn.execute(sql, part):
                try:
                    found[key] = (_dec(text), dict(json.loads(_dec(meta))["m"]))
                except _UNREADABLE:
                    self.unreadable.add(key)
        return found

    # BaseStore ------------------------------------------------------------------------

    def mset(self, key_value_pairs: Sequence[tuple[str, Document]]) -> None:
        """Store documents: slices of a source as spans, the rest whole (last pair wins).

        A source written earlier in the same transaction (the first batch of a
        large source's nodes) is known without reading its text back.
        """
        key_value_pairs = list(dict(key_value_pairs).items())
        with self.db.write() as conn:
            if self._written_in != self.db.transactions:
                self._written, self._written_in = {}, self.db.transactions
            whole: dict[str, Document] = {}
            batch: dict[str, tuple[str, dict[str, Any]]] = {}
            for key, doc in key_value_pairs:
                if is_node_key(key) and parse_node_key(key).level == DOC_LEVEL:
                    batch[key] = (doc.page_content, doc.metadata)
            candidates = [k for k, _ in key_value_pairs if is_node_key(k) and k not in batch]
            sources = self._sources(
                {node_key(source_key_of(k), DOC_LEVEL, 0) for k in candidates},
                {**self._written, **batch},
            )
            slices: list[tuple[str, int, int, str]] = []
            for key, doc in key_value_pairs:
                row = None
                if is_node_key(key) and key not in batch:
                    source = sources.get(node_key(source_key_of(key), DOC_LEVEL, 0))
                    row = self._slice_row(key, doc, source)
                if row is None:
                    whole[key] = doc
                else:
                    slices.append((key, *row))
            keys = [k for k, _ in key_value_pairs]
            self._delete(conn, keys)
            conn.executemany(
                "INSERT INTO nodes VALUES (?, ?, ?, ?)",
                [(k, a, b, _enc(m)) for k, a, b, m in sorted(slices)],
            )
            conn.executemany(
                "INSERT INTO docs VALUES (?, ?, ?)",
                [(k, _enc(d.page_content), _enc(_dumps(_whole_meta(d)))) for k, d in whole.items()],
            )
            self._written.update(batch)
        if self.on_put is not None:
            self.on_put(sum(1 for k, _ in key_value_pairs if is_node_key(k)))

    def mget(self, keys: Sequence[str]) -> list[Document | None]:
        """Fetch documents (``None`` for a missing key, or a slice whose source is gone)."""
        conn = self.db.conn
        found: dict[str, Document | None] = {}
        rows: dict[str, tuple[int, int, str]] = {}
        unique = list(dict.fromkeys(keys))
        with self.db.read():
            for part in chunks(unique):
                sql = f"SELECT key, start, stop, meta FROM nodes WHERE key IN ({_marks(len(part))})"  # noqa: S608
                for key, start, stop, meta in conn.execute(sql, part):
                    rows[key] = (start, stop, meta)
                rest = [k for k in part if k not in rows]
                sql = f"SELECT key, text, meta FROM docs WHERE key IN ({_marks(len(rest))})"  # noqa: S608
                for key, text, meta in conn.execute(sql, rest) if rest else ():
                    found[key] = self._readable(key, _whole_doc, key, text, meta)
            sources = self._sources({node_key(source_key_of(k), DOC_LEVEL, 0) for k in rows})
        for key, (start, stop, meta) in rows.items():
            source = sources.get(node_key(source_key_of(key), DOC_LEVEL, 0))
            if source is not None:
                found[key] = self._readable(key, _slice_doc, key, start, stop, meta, source)
        return [found.get(k) for k in keys]

    def _readable(self, key: str, decode: Any, *args: Any) -> Document | None:
        """``decode(*args)``, or ``None`` (the key noted as unreadable) when the bytes are bad."""
        try:
            doc: Document = decode(*args)
        except _UNREADABLE:
            self.unreadable.add(key)
            return None
        return doc

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete keys (unknown keys are ignored)."""
        with self.db.write() as conn:
            self._delete(conn, list(keys))

    def _delete(self, conn: sqlite3.Connection, keys: Sequence[str]) -> None:
        for key in keys:
            self._written.pop(key, None)
        for part in chunks(keys):
            conn.execute(f"DELETE FROM nodes WHERE key IN ({_marks(len(part))})", part)  # noqa: S608
            conn.execute(f"DELETE FROM docs WHERE key IN ({_marks(len(part))})", part)  # noqa: S608

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Every key (or those starting with ``prefix``), in key order."""
        sql = "SELECT key FROM nodes UNION ALL SELECT key FROM docs ORDER BY key"
        with self.db.read():
            keys = [row[0] for row in self.db.conn.execute(sql)]
        for key in keys:
            if prefix is None or key.startswith(prefix):
                yield key


def _whole_meta(doc: Document) -> dict[str, Any]:
    return {"m": doc.metadata, "id": doc.id}


def _whole_doc(key: str, text: bytes, meta: bytes) -> Document:
    payload = json.loads(_dec(meta))
    return Document(page_content=_dec(text), metadata=payload["m"], id=payload["id"])


def _slice_doc(
    key: str, start: int, stop: int, meta: bytes, source: tuple[str, dict[str, Any]]
) -> Document:
    return SQLiteDocStore._decode_slice(key, (start, stop, _dec(meta)), source)


_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError)
"""What decoding a row whose bytes changed raises (``UnicodeDecodeError``, a JSON error and
a pydantic ``ValidationError`` are ``ValueError`` too)."""
