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
(:class:`SQLiteFaissIndex`: the ``children`` table maps each leaf key to a
vector) and the vectors share one connection, so a writer's transaction
(:meth:`Database.write`) commits nodes, manifests and child vectors together or
not at all. The FAISS index is not a file: it is rebuilt in memory from the
``children`` and ``vectors`` tables when the store is opened, inside one read
transaction (a WAL snapshot), so a reader never sees half a write.

Vectors are content-addressed (SHA-256 of the embedded text,
:class:`CachedEmbeddings`): a passage that was embedded once, for a file that
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
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.stores import BaseStore

from langchain_s2b.core.keys import is_node_key, node_key, parse_node_key, source_key_of
from langchain_s2b.core.tree import DOC_LEVEL, NODE_FIELDS
from langchain_s2b.store.faiss_index import FaissIndex

SCHEMA_VERSION = 1
_CHUNK = 500
"""Keys per ``IN (...)`` query (SQLite's variable limit is far above)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs (key TEXT PRIMARY KEY, text BLOB NOT NULL, meta BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    key TEXT PRIMARY KEY, start INTEGER NOT NULL, stop INTEGER NOT NULL, meta BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, vec BLOB NOT NULL, digest BLOB
);
CREATE TABLE IF NOT EXISTS children (key TEXT PRIMARY KEY, vec INTEGER NOT NULL) WITHOUT ROWID;
"""


class Database:
    """One SQLite connection in WAL mode, with explicit read and write transactions.

    Args:
        path: the database file (created with its tables when missing).
        timeout: seconds to wait for SQLite's own lock.
    """

    def __init__(self, path: str | Path, *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.conn = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA page_size=8192")  # new files only: five 384-d vectors fill a page
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self._depth = 0
        self._digests: bool | None = None

    def create_tables(self, extra: str = "") -> None:
        """Create the tables (and ``extra`` DDL) if they do not exist yet."""
        with self.write():
            for statement in (_SCHEMA + extra).split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            if self.get_meta("schema") is None:
                self.set_meta("schema", str(SCHEMA_VERSION))

    def has_tables(self) -> bool:
        """Whether the ``meta`` table exists (the database was initialised)."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        return row is not None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed whole, or rolled back.

        Inside a transaction that SQLite already ended (it rolls back by itself
        on a full disk), a nested write is refused instead of running alone.
        """
        if self._depth:
            if not self.conn.in_transaction:
                msg = "SQLite ended the transaction after an error; nothing more is written in it"
                raise sqlite3.OperationalError(msg)
            self._depth += 1
            try:
                yield self.conn
            finally:
                self._depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        finally:
            self._depth = 0

    def _rollback(self) -> None:
        """Roll back, unless SQLite did already (a full disk ends the transaction itself)."""
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the error being raised says more
                self.conn.execute("ROLLBACK")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees one snapshot."""
        if self._depth:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        self._depth = 1
        try:
            yield self.conn
        finally:
            self._depth = 0
            self._end_read()

    def _end_read(self) -> None:
        """End a read transaction; it wrote nothing, so a failure to end it loses nothing."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error:  # e.g. a damaged file: what the reader read says so already
                self._rollback()

    def get_meta(self, name: str) -> str | None:
        """A value of the ``meta`` table."""
        row = self.conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, name: str, value: str) -> None:
        """Set a value of the ``meta`` table."""
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))

    def has_vector_digests(self) -> bool:
        """Whether the ``vectors`` table has its ``digest`` column (stores made since it came)."""
        if self._digests is None:
            columns = [row[1] for row in self.conn.execute("PRAGMA table_info(vectors)")]
            self._digests = "digest" in columns
        return self._digests

    def add_vector_digests(self) -> None:
        """Give an older store the ``digest`` column, filled from the vectors as they are."""
        if self.has_vector_digests():
            return
        with self.write() as conn:
            conn.execute("ALTER TABLE vectors ADD COLUMN digest BLOB")
            rows = conn.execute("SELECT id, hash, vec FROM vectors").fetchall()
            conn.executemany(
                "UPDATE vectors SET digest = ? WHERE id = ?",
                [(vector_digest(h, v), i) for i, h, v in rows],
            )
        self._digests = True

    def insert_vectors(self, rows: Sequence[tuple[bytes, bytes]]) -> None:
        """Store ``(hash, vector bytes)`` rows not stored yet, with their digests."""
        if self.has_vector_digests():
            self.conn.executemany(
                "INSERT OR IGNORE INTO vectors (hash, vec, digest) VALUES (?, ?, ?)",
                [(h, v, vector_digest(h, v)) for h, v in rows],
            )
        else:
            self.conn.executemany("INSERT OR IGNORE INTO vectors (hash, vec) VALUES (?, ?)", rows)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def vector_digest(hash_: bytes, vec: bytes) -> bytes:
    """The digest of a vector row: SHA-256 of its text hash and its bytes (first 64 bits)."""
    return hashlib.sha256(bytes(hash_) + bytes(vec)).digest()[:8]


def chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


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
        """Store documents: slices of a source as spans, the rest whole (last pair wins)."""
        key_value_pairs = list(dict(key_value_pairs).items())
        whole: dict[str, Document] = {}
        batch: dict[str, tuple[str, dict[str, Any]]] = {}
        for key, doc in key_value_pairs:
            if is_node_key(key) and parse_node_key(key).level == DOC_LEVEL:
                batch[key] = (doc.page_content, doc.metadata)
        candidates = [k for k, _ in key_value_pairs if is_node_key(k) and k not in batch]
        sources = self._sources(
            {node_key(source_key_of(k), DOC_LEVEL, 0) for k in candidates}, batch
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
        with self.db.write() as conn:
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

    @staticmethod
    def _delete(conn: sqlite3.Connection, keys: Sequence[str]) -> None:
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
        with self.db.write():
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
        with self.db.write() as conn:
            if ids is None:
                return int(conn.execute(f"DELETE FROM vectors WHERE {unused}").rowcount)  # noqa: S608
            for part in chunks(sorted(set(ids))):
                sql = f"DELETE FROM vectors WHERE id IN ({_marks(len(part))}) AND {unused}"  # noqa: S608
                gone += int(conn.execute(sql, part).rowcount)
        return gone


class SQLiteFaissIndex(FaissIndex):
    """A :class:`FaissIndex` whose vectors live in the database; FAISS is rebuilt on open.

    Every way in (``add_texts``, and ``add_vectors`` with vectors embedded ahead
    of the write) records each leaf key's vector in the ``children`` table, the
    vector itself stored once by content hash; ``delete`` removes the rows. Both
    join the caller's transaction, so the child index commits with the nodes.
    """

    def __init__(self, embedding: CachedEmbeddings, **kwargs: Any) -> None:
        super().__init__(embedding, **kwargs)
        self.cache = embedding
        self.released: set[int] = set()
        """Vector ids of deleted children (candidates for ``collect_garbage``)."""
        self.unrestored: list[str] = []
        """Children the last :meth:`restore` left out: their node or vector is absent or bad."""

    def add_vectors(
        self,
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        """Add leaves with their vectors: FAISS in memory, the rows in the database."""
        matrix = np.asarray(vectors, dtype=np.float32)
        hashes = [text_hash(t) for t in texts]
        with self.cache.db.write() as conn:
            if len(matrix) == len(texts):
                rows = [(h, v.tobytes()) for h, v in zip(hashes, matrix, strict=True)]
                self.cache.db.insert_vectors(rows)
            added = super().add_vectors(matrix, texts, metadatas, ids)
            known = self.cache.lookup(hashes)
            last = dict(zip(ids, hashes, strict=True))  # an id given twice: its last vector
            conn.executemany(
                "INSERT OR REPLACE INTO children VALUES (?, ?)",
                [(key, known[h]) for key, h in last.items()],
            )
            return added

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove leaves by key (``None``: all) from FAISS and from the ``children`` table."""
        with self.cache.db.write() as conn:
            if ids is None:
                self.released.update(r[0] for r in conn.execute("SELECT vec FROM children"))
                conn.execute("DELETE FROM children")
                return super().delete(None)
            keys = list(ids)
            for part in chunks(keys):
                where = f"WHERE key IN ({_marks(len(part))})"
                found = conn.execute(f"SELECT vec FROM children {where}", part).fetchall()  # noqa: S608
                self.released.update(row[0] for row in found)
                conn.execute(f"DELETE FROM children {where}", part)  # noqa: S608
            return super().delete(keys)

    def restore(self, docstore: BaseStore[str, Document]) -> int:
        """Fill FAISS from the ``children`` table (call inside a read transaction)."""
        pairs = self.cache.db.conn.execute("SELECT key, vec FROM children ORDER BY key").fetchall()
        self.unrestored = []
        if not pairs:
            return 0
        keys = [k for k, _ in pairs]
        usable = _usable_vectors(self.cache.db, {v for _, v in pairs})
        docs = docstore.mget(keys)
        kept = [i for i, d in enumerate(docs) if d is not None and pairs[i][1] in usable]
        self.unrestored = [keys[i] for i in sorted(set(range(len(keys))) - set(kept))]
        if not kept:
            return 0
        FaissIndex.add_vectors(
            self,
            np.stack([usable[pairs[i][1]] for i in kept]),
            [docs[i].page_content for i in kept],  # type: ignore[union-attr]
            [docs[i].metadata for i in kept],  # type: ignore[union-attr]
            [keys[i] for i in kept],
        )
        return len(kept)


def _usable_vectors(db: Database, ids: Iterable[int]) -> dict[int, np.ndarray]:
    """The vectors with these ids that exist, have the common size and are finite."""
    raw: dict[int, bytes] = {}
    for part in chunks(sorted(ids)):
        sql = f"SELECT id, vec FROM vectors WHERE id IN ({_marks(len(part))})"  # noqa: S608
        raw.update(db.conn.execute(sql, part).fetchall())
    return {i: v for i, v in _vectors_of_common_size(raw).items() if np.isfinite(v).all()}


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
    """What SQLite's own check (``PRAGMA quick_check``) found wrong with the file."""
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
    """What SQLite's own check of the file (``PRAGMA quick_check``) finds wrong; ``[]``: none."""
    with db.read():
        try:
            found = [str(row[0]) for row in db.conn.execute("PRAGMA quick_check")]
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


def dangling_children(db: Database) -> int:
    """How many children point at a vector row that is gone (a cheap check)."""
    sql = "SELECT count(*) FROM children WHERE vec NOT IN (SELECT id FROM vectors)"
    return int(db.conn.execute(sql).fetchone()[0])


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
            if doc is not None and text_hash(doc.page_content) != hash_:
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
            conn.execute(f"DELETE FROM children WHERE key IN ({_marks(len(part))})", part)  # noqa: S608
