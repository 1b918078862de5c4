"""Vectors by content hash: each text embedded once, kept in the database, read back by id.

A vector's row is keyed by the SHA-256 of the embedded text (:func:`text_hash`)
and keeps a digest of its bytes, so a damaged vector is found and left out.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_s2b.store.sqlite.database import Database, chunks, marks

__all__ = ["CachedEmbeddings", "text_hash"]

_marks = marks


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
