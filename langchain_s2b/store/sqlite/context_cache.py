"""The context model's answers, kept in the database by digest (a ``BaseStore`` of bytes)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from langchain_core.stores import BaseStore

from langchain_s2b.store.sqlite.database import Database, chunks, marks

__all__ = ["SQLiteContextCache"]

_marks = marks


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
