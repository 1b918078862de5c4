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

import contextlib
import hashlib
import json
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.stores import BaseStore

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.keys import is_node_key, node_key, parse_node_key, source_key_of
from langchain_s2b.core.tree import DOC_LEVEL, NODE_FIELDS
from langchain_s2b.store.sqlite.database import (
    LEXICAL_TABLE,
    Database,
    chunks,
    marks,
    vector_digest,
)

__all__ = [
    "CachedEmbeddings",
    "SQLiteContextCache",
    "Damage",
    "Database",
    "SQLiteDocStore",
    "SQLiteFaissIndex",
    "SQLiteRows",
    "file_damage",
    "find_damage",
    "index_file",
    "mend",
    "readable_rows",
    "salvage_vectors",
    "text_hash",
    "vector_digest",
]
from langchain_s2b.store.sqlite.index_file import (
    INDEX_FILE,
    index_file,
    read_record,
    record_existing,
)
from langchain_s2b.store.sqlite.index_file import check as check_file
from langchain_s2b.store.sqlite.index_file import write as write_index_file
from langchain_s2b.store.sqlite.sqlite_lexical import SQLiteLexical
from langchain_s2b.store.vectors import FaissIndex, normalise, read_faiss_file

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


# Vectors --------------------------------------------------------------------------------


def text_hash(text: str) -> bytes:
    """The content address of a passage: SHA-256 of its UTF-8 text (first 128 bits)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]


class CachedEmbeddings(Embeddings):
    """An embedding model whose passage vectors are kept in the database by content hash.

    ``embed_documents`` looks every text up by :func:`text_hash`, embeds only the
    missing ones (each distinct text once, shortest first so that a batch pads
    little) and stores them. Queries go to the model unchanged.
    """

    def __init__(self, model: Embeddings, db: Database, *, batch_size: int = 64) -> None:
        self.model = model
        self.db = db
        self.batch_size = batch_size

    def lookup(self, hashes: Sequence[bytes]) -> dict[bytes, int]:
        """Hash -> vector row id, for the hashes already stored."""
        out: dict[bytes, int] = {}
        unique = list(dict.fromkeys(hashes))
        for part in chunks(unique):
            sql = f"SELECT hash, id FROM vectors WHERE hash IN ({_marks(len(part))})"  # noqa: S608
            out.update(self.db.conn.execute(sql, part).fetchall())
        return out

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts that have no stored vector yet, shortest first."""
        by_hash = {text_hash(t): t for t in texts}
        known = self.lookup(list(by_hash))
        return sorted((t for h, t in by_hash.items() if h not in known), key=len)

    def embed_missing(self, texts: Sequence[str]) -> int:
        """Embed and store ``texts`` (distinct, not stored yet) in one batch; returns the count."""
        if not texts:
            return 0
        vectors = np.asarray(self.model.embed_documents(list(texts)), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts) or not np.isfinite(vectors).all():
            msg = f"The embedding returned {vectors.shape} values for {len(texts)} texts."
            raise ValueError(msg)
        rows = [(text_hash(t), v.tobytes()) for t, v in zip(texts, vectors, strict=True)]
        with self.db.write(changes=False):  # a cache: no search sees it yet
            self.db.insert_vectors(rows)
        return len(texts)

    def vectors_for(self, texts: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """``(vectors, row ids)`` for ``texts`` in order; missing ones are embedded first."""
        todo = self.missing(texts)
        for start in range(0, len(todo), self.batch_size):
            self.embed_missing(todo[start : start + self.batch_size])
        hashes = [text_hash(t) for t in texts]
        ids = self.lookup(hashes)
        order = [ids[h] for h in hashes]
        return self.load(order), order

    def load(self, ids: Sequence[int]) -> np.ndarray:
        """The vectors with these row ids, in order, as a float32 matrix."""
        found: dict[int, bytes] = {}
        for part in chunks(list(dict.fromkeys(ids))):
            sql = f"SELECT id, vec FROM vectors WHERE id IN ({_marks(len(part))})"  # noqa: S608
            found.update(self.db.conn.execute(sql, part).fetchall())
        if not ids:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([np.frombuffer(found[i], dtype=np.float32) for i in ids])

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors for passages, from the store when known."""
        vectors, _ = self.vectors_for(texts)
        return [list(map(float, v)) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        """The model's query vector."""
        return self.model.embed_query(text)

    def collect_garbage(self, ids: Iterable[int] | None = None) -> int:
        """Delete vectors no child uses (all, or among ``ids``); returns how many went."""
        unused = "id NOT IN (SELECT vec FROM children)"
        gone = 0
        with self.db.write(changes=False) as conn:
            if ids is None:
                return int(conn.execute(f"DELETE FROM vectors WHERE {unused}").rowcount)  # noqa: S608
            for part in chunks(sorted(set(ids))):
                sql = f"DELETE FROM vectors WHERE id IN ({_marks(len(part))}) AND {unused}"  # noqa: S608
                gone += int(conn.execute(sql, part).rowcount)
        return gone


_CONTEXTS = (
    "CREATE TABLE IF NOT EXISTS contexts (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
)


class SQLiteContextCache(BaseStore[str, bytes]):
    """The context model's answers by cache key, in the database (a cache, like the vectors).

    Each write commits at once when no transaction is open (Ctrl-C keeps what
    the model wrote; the next run asks only for the rest). The table is made
    by the first write: a store that never had a context model has none.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def _exists(self) -> bool:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'contexts'"
        return self.db.conn.execute(sql).fetchone() is not None

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """The cached values (``None``: not cached)."""
        found: dict[str, bytes] = {}
        if keys and self._exists():
            for part in chunks(list(dict.fromkeys(keys))):
                sql = f"SELECT key, value FROM contexts WHERE key IN ({_marks(len(part))})"  # noqa: S608
                found.update((k, bytes(v)) for k, v in self.db.conn.execute(sql, part))
        return [found.get(key) for key in keys]

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Cache values (committed with the caller's transaction, else at once)."""
        with self.db.write(changes=False) as conn:
            conn.execute(_CONTEXTS)
            conn.executemany("INSERT OR REPLACE INTO contexts VALUES (?, ?)", key_value_pairs)

    def mdelete(self, keys: Sequence[str]) -> None:
        """Forget values."""
        if not self._exists():
            return
        with self.db.write(changes=False) as conn:
            for part in chunks(list(keys)):
                conn.execute(f"DELETE FROM contexts WHERE key IN ({_marks(len(part))})", part)  # noqa: S608

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Every cached key (or those starting with ``prefix``)."""
        if not self._exists():
            return
        keys = [str(r[0]) for r in self.db.conn.execute("SELECT key FROM contexts ORDER BY key")]
        yield from (k for k in keys if prefix is None or k.startswith(prefix))


class SQLiteRows:
    """The child index's records in the database: each leaf a ``children`` row (and its terms).

    The counterpart of :class:`~langchain_s2b.store.vectors.records.Records` for
    :class:`SQLiteFaissIndex`: a leaf's row number is its FAISS id, its key and
    vector are a ``children`` row, its text and metadata are its node in the
    docstore (read when asked for), and its terms a row of the lexical table.
    Writes join the caller's transaction: a leaf, its vector and its terms are
    committed together.
    """

    def __init__(
        self, db: Database, docstore: SQLiteDocStore, lexical: SQLiteLexical | None
    ) -> None:
        self.db = db
        self.docstore = docstore
        self.lexical = lexical
        self.released: set[int] = set()
        """Vector ids of removed leaves (candidates for ``collect_garbage``)."""

    def __len__(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM children").fetchone()[0])

    # Writing ----------------------------------------------------------------------

    def add(
        self,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
        metas: Sequence[Any],
    ) -> None:
        """Add leaves whose vectors are stored (by the hash of what is embedded for them)."""
        if not rows:
            return
        embedded = [embedded_text(t, m) for t, m in zip(texts, metas, strict=True)]
        hashes = [text_hash(t) for t in embedded]
        with self.db.write() as conn:
            known = _vector_ids(conn, hashes)
            missing = [k for k, h in zip(keys, hashes, strict=True) if h not in known]
            if missing:
                msg = f"No stored vector for the text of {missing[0]!r}; embed it first."
                raise ValueError(msg)
            conn.executemany(
                "INSERT INTO children (row, key, vec) VALUES (?, ?, ?)",
                [(r, k, known[h]) for r, k, h in zip(rows, keys, hashes, strict=True)],
            )
            if self.lexical is not None:
                self.lexical.add(conn, rows, keys, embedded)

    def remove(self, rows: Sequence[int]) -> None:
        """Remove leaves by row."""
        with self.db.write() as conn:
            for part in chunks(list(rows)):
                where = f"WHERE row IN ({_marks(len(part))})"
                found = conn.execute(f"SELECT vec FROM children {where}", part).fetchall()  # noqa: S608
                self.released.update(r[0] for r in found)
                conn.execute(f"DELETE FROM children {where}", part)  # noqa: S608
            if self.lexical is not None:
                self.lexical.remove(conn, rows)

    def clear(self) -> None:
        """Remove every leaf."""
        with self.db.write() as conn:
            self.released.update(r[0] for r in conn.execute("SELECT vec FROM children"))
            conn.execute("DELETE FROM children")
            if self.lexical is not None:
                self.lexical.clear(conn)

    # Reading ----------------------------------------------------------------------

    def row(self, key: str) -> int:
        """The row of ``key`` (``-1``: not held)."""
        found = self.db.conn.execute("SELECT row FROM children WHERE key = ?", (key,)).fetchone()
        return -1 if found is None else int(found[0])

    def key(self, row: int) -> str | None:
        """The key of a row (``None``: not held)."""
        found = self.db.conn.execute("SELECT key FROM children WHERE row = ?", (row,)).fetchone()
        return None if found is None else str(found[0])

    def records(self, rows: Sequence[int]) -> list[tuple[str, str, dict[str, Any]] | None]:
        """``(key, text, metadata)`` per row (``None``: not held, or its node is gone)."""
        wanted = [r for r in dict.fromkeys(rows) if r >= 0]
        keys: dict[int, str] = {}
        with self.db.read() as conn:
            for part in chunks(wanted):
                sql = f"SELECT row, key FROM children WHERE row IN ({_marks(len(part))})"  # noqa: S608
                keys.update(conn.execute(sql, part).fetchall())
            names = list(keys.values())
            docs = dict(zip(names, self.docstore.mget(names), strict=True))
        out: list[tuple[str, str, dict[str, Any]] | None] = []
        for row in rows:
            if row < 0:
                out.append(None)
                continue
            key = keys.get(row)
            doc = None if key is None else docs.get(key)
            if doc is None:  # FAISS holds it, so the database must: damage, never a hole
                what = f"row {row}" if key is None else repr(key)
                msg = f"Leaf {what} is in the child index but not in the docstore"
                raise MissingNodeError(msg)
            out.append((str(key), doc.page_content, doc.metadata))
        return out

    def record(self, row: int) -> tuple[str, str, dict[str, Any]] | None:
        """``(key, text, metadata)`` of a row."""
        return self.records([row])[0]

    def meta(self, row: int) -> dict[str, Any]:
        """The metadata of a row (``{}`` when its node is gone)."""
        found = self.record(row)
        return {} if found is None else found[2]

    def keys(self) -> list[str]:
        """Every key held."""
        return [str(r[0]) for r in self.db.conn.execute("SELECT key FROM children ORDER BY key")]

    def entries(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Every leaf's record, by row."""
        rows = self.live_rows().tolist()
        for part in chunks(rows, 1000):
            yield from filter(None, self.records(part))

    def live_rows(self) -> np.ndarray:
        """Every row, ascending."""
        rows = self.db.conn.execute("SELECT row FROM children ORDER BY row").fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def sources(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(source key, its document's metadata)`` per source (a filter on its fields)."""
        sql = "SELECT key, meta FROM docs WHERE key GLOB '*/doc/0'"
        for key, meta in self.db.conn.execute(sql).fetchall():
            try:
                found = json.loads(_dec(meta))["m"]
            except _UNREADABLE:
                continue
            if isinstance(found, dict):
                yield key.split("/", 1)[0], found

    def source_rows(self, source: str) -> np.ndarray:
        """The rows of one source's leaves."""
        sql = "SELECT row FROM children WHERE key >= ? AND key < ?"
        rows = self.db.conn.execute(sql, (f"{source}/", f"{source}0")).fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def unsourced(self) -> list[int]:
        """Rows whose metadata names no source: none here (every leaf has its source)."""
        return []

    def write(self, directory: Path, rows: np.ndarray | None = None) -> list[str]:
        """Not here: the database is the store's file (``save`` is for ``FaissIndex``)."""
        msg = "SQLiteFaissIndex keeps its rows in its database; it is not saved into a directory."
        raise ValueError(msg)


def _vector_ids(conn: sqlite3.Connection, hashes: Sequence[bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for part in chunks(list(dict.fromkeys(hashes))):
        sql = f"SELECT hash, id FROM vectors WHERE hash IN ({_marks(len(part))})"  # noqa: S608
        out.update(conn.execute(sql, part).fetchall())
    return out


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


def _common_size(db: Database) -> int:
    """The byte size most vectors have (a damaged one of another size is left out)."""
    found = db.conn.execute(
        "SELECT length(vec), count(*) FROM vectors GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
    ).fetchone()
    size = 0 if found is None else int(found[0])
    return size if size and size % 4 == 0 else -1


def _vectors_of_common_size(raw: dict[int, bytes]) -> dict[int, np.ndarray]:
    if not raw:
        return {}
    size = Counter(len(v) for v in raw.values()).most_common(1)[0][0]
    if size == 0 or size % 4:
        return {}
    return {i: np.frombuffer(v, dtype=np.float32) for i, v in raw.items() if len(v) == size}


# Damage -----------------------------------------------------------------------------------


@dataclass
class Damage:
    """Rows whose bytes fail their checks (:func:`find_damage`); :func:`mend` removes them."""

    database: list[str] = field(default_factory=list)
    """What SQLite's own check (``PRAGMA integrity_check``) found wrong with the file."""
    unreadable: list[str] = field(default_factory=list)
    """Docstore keys whose row no longer decodes."""
    vectors: list[int] = field(default_factory=list)
    """Vector ids whose bytes fail their digest (or their size, or are not finite)."""
    children: list[str] = field(default_factory=list)
    """Leaf keys whose vector is absent, damaged, or was made for another text."""
    unchecked: int = 0
    """Vectors without a digest (an older store; :meth:`Database.add_vector_digests`)."""

    @property
    def ok(self) -> bool:
        """Nothing damaged."""
        return not (self.database or self.unreadable or self.vectors or self.children)


def file_damage(db: Database) -> list[str]:
    """What SQLite's own check of the file finds wrong; ``[]``: none.

    ``PRAGMA integrity_check``, not ``quick_check``: only the full check sees an
    index whose entries no longer match its table's rows (a damaged page of the
    key index makes lookups miss rows that a scan finds, and a repair that
    trusts it writes duplicates).
    """
    with db.read():
        try:
            found = [str(row[0]) for row in db.conn.execute("PRAGMA integrity_check")]
        except sqlite3.DatabaseError as err:
            found = [str(err)]
    return [] if found == ["ok"] else found


def find_damage(db: Database, docstore: SQLiteDocStore) -> Damage:
    """Check every row of a sound file (call in a transaction; :func:`file_damage` first).

    The text and metadata rows, every vector's digest, and that each child's
    vector is the one made for its text.
    """
    damage = Damage()
    docstore.unreadable = set()
    keys = list(docstore.yield_keys())
    for part in chunks(keys):
        docstore.mget(part)
    damage.unreadable = sorted(docstore.unreadable)
    damage.vectors, damage.unchecked = _damaged_vectors(db)
    damage.children = _damaged_children(db, docstore, set(damage.vectors))
    return damage


def _damaged_vectors(db: Database) -> tuple[list[int], int]:
    """Ids of vectors that fail their checks, and how many have no digest to check."""
    digests = db.has_vector_digests()
    sql = f"SELECT id, hash, vec, {'digest' if digests else 'NULL'} FROM vectors"  # noqa: S608
    rows = db.conn.execute(sql).fetchall()
    usable = _vectors_of_common_size({i: v for i, _, v, _ in rows})
    bad, unchecked = [], 0
    for i, hash_, vec, digest in rows:
        if digest is None:
            unchecked += 1
        fine = (
            i in usable
            and np.isfinite(usable[i]).all()
            and len(hash_) == len(text_hash(""))
            and (digest is None or digest == vector_digest(hash_, vec))
        )
        if not fine:
            bad.append(i)
    return bad, unchecked


def _damaged_children(db: Database, docstore: SQLiteDocStore, bad: set[int]) -> list[str]:
    """Children whose vector is absent or in ``bad``, or whose vector's hash is not their text's."""
    sql = "SELECT c.key, c.vec, v.hash FROM children c LEFT JOIN vectors v ON v.id = c.vec"
    rows = db.conn.execute(sql).fetchall()
    damaged = [key for key, vec, hash_ in rows if hash_ is None or vec in bad]
    sound = [(key, hash_) for key, vec, hash_ in rows if hash_ is not None and vec not in bad]
    for part in chunks(sound):
        docs = docstore.mget([key for key, _ in part])
        for (key, hash_), doc in zip(part, docs, strict=True):
            if (
                doc is not None
                and text_hash(embedded_text(doc.page_content, doc.metadata)) != hash_
            ):
                damaged.append(key)
    return sorted(damaged)


def readable_rows(db: Database, sql: str) -> tuple[list[tuple[Any, ...]], bool]:
    """The rows of ``sql`` that can be read from a damaged file, and whether all could."""
    rows: list[tuple[Any, ...]] = []
    try:
        for row in db.conn.execute(sql):
            rows.append(tuple(row))
    except sqlite3.DatabaseError:
        return rows, False
    return rows, True


def salvage_vectors(db: Database) -> list[tuple[bytes, bytes]]:
    """``(hash, vector bytes)`` of the vectors a damaged file still holds whole (digest checked)."""
    digests = db.has_vector_digests()
    sql = f"SELECT hash, vec, {'digest' if digests else 'NULL'} FROM vectors"  # noqa: S608
    rows, whole = readable_rows(db, sql)
    if not whole:  # a damaged page: read the others one row at a time
        rows = _rows_one_by_one(db, sql)
    rows = [(h, v, d) for h, v, d in rows if isinstance(h, bytes) and isinstance(v, bytes)]
    usable = _vectors_of_common_size({i: bytes(v) for i, (_, v, _) in enumerate(rows)})
    return [
        (bytes(h), bytes(v))
        for i, (h, v, d) in enumerate(rows)
        if i in usable
        and np.isfinite(usable[i]).all()
        and len(h) == len(text_hash(""))
        and (d is None or d == vector_digest(h, v))
    ]


def _rows_one_by_one(db: Database, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (over ``vectors``) read by id, skipping those that fail."""
    try:
        last = db.conn.execute("SELECT max(id) FROM vectors").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        return []
    rows = []
    for i in range(1, int(last) + 1):
        with contextlib.suppress(sqlite3.DatabaseError):
            rows += db.conn.execute(f"{sql} WHERE id = ?", (i,)).fetchall()
    return rows


def mend(db: Database, damage: Damage) -> None:
    """Delete the damaged rows (their sources then have missing pieces: verify rebuilds them)."""
    with db.write() as conn:
        for part in chunks(damage.unreadable):
            for table in ("nodes", "docs"):
                conn.execute(f"DELETE FROM {table} WHERE key IN ({_marks(len(part))})", part)  # noqa: S608
        for part in chunks(damage.vectors):
            conn.execute(f"DELETE FROM vectors WHERE id IN ({_marks(len(part))})", part)  # noqa: S608
        for part in chunks(damage.children):
            where = f"IN ({_marks(len(part))})"
            rows = f"SELECT row FROM children WHERE key {where}"  # noqa: S608
            conn.execute(f"DELETE FROM {LEXICAL_TABLE} WHERE rowid IN ({rows})", part)  # noqa: S608
            conn.execute(f"DELETE FROM children WHERE key {where}", part)  # noqa: S608
