"""Add and delete sources across both stores, as generators of I/O requests.

Write order makes a source visible only when it is whole: nodes first, then
the leaf vectors, then the manifest (the commit record). Deletion runs in the
reverse order. An unchanged source (same manifest digest) is skipped.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.ingest import (
    IndexingResult,
    Source,
    identify,
    is_empty,
    manifest_keys,
    prepare,
)
from langchain_s2b.keys import encode_source_key, manifest_key
from langchain_s2b.ops import AddLeaves, Fetch, Put, Remove, RemoveLeaves, Request
from langchain_s2b.splitting import Level, estimate_tokens


@dataclass
class Config:
    """What ingestion needs to know about the retriever."""

    levels: list[Level]
    source_fields: list[str] = field(default_factory=list)
    input_limit: int | None = None
    """The embedding model's input window in tokens, when known."""
    count_tokens: Callable[[str], int] = estimate_tokens

    def fingerprint(self) -> str:
        """Identifies the split configuration (a change re-indexes sources)."""
        parts = []
        for level in self.levels:
            sp = level.splitter
            size = getattr(sp, "_chunk_size", None), getattr(sp, "_chunk_overlap", None)
            parts.append(f"{level.name}:{type(sp).__name__}:{size}")
        return "|".join(parts)


def add(
    config: Config, documents: Sequence[Document], ids: Sequence[str] | None
) -> Generator[Request, Any, IndexingResult]:
    """Upsert sources: skip unchanged, replace changed, add new."""
    sources = identify(documents, ids, config.source_fields, config.fingerprint())
    result = IndexingResult()
    current = [s for s in sources if not is_empty(s)]
    result.empty = [s.source_id for s in sources if is_empty(s)]
    old = yield Fetch([manifest_key(s.source_key) for s in current])
    changed: list[Source] = []
    for source, manifest in zip(current, old, strict=True):
        if manifest is not None and manifest.metadata.get("digest") == source.digest:
            result.unchanged.append(source.source_id)
            continue
        if manifest is not None:
            result.updated.append(source.source_id)
            stale = manifest_keys(manifest)
            result.deleted_keys += len(stale) - 1
            yield from _remove(stale, manifest)
        else:
            result.added.append(source.source_id)
        changed.append(source)
    for source in changed:
        prepared = prepare(source, config.levels)
        _warn_if_too_long(config, prepared.leaves)
        yield Put(prepared.nodes)
        yield AddLeaves(prepared.leaves)
        yield Put([(str(prepared.manifest.id), prepared.manifest)])
        result.num_children += len(prepared.leaves)
    return result


def delete(source_ids: Sequence[str]) -> Generator[Request, Any, list[str]]:
    """Delete sources by id; unknown ids are reported by their absence."""
    if isinstance(source_ids, str):
        msg = f"delete() takes a list of source ids; got the string {source_ids!r}."
        raise TypeError(msg)
    keys = [manifest_key(encode_source_key(sid)) for sid in source_ids]
    manifests = yield Fetch(keys)
    deleted = []
    for sid, manifest in zip(source_ids, manifests, strict=True):
        if manifest is not None:
            yield from _remove(manifest_keys(manifest), manifest)
            deleted.append(sid)
    return deleted


def remove_source(manifest: Document) -> Generator[Request, Any, None]:
    """Remove every key a source's manifest lists, the manifest first."""
    yield from _remove(manifest_keys(manifest), manifest)


def _remove(keys: list[str], manifest: Document) -> Generator[Request, Any, None]:
    """Remove a source: manifest first (it stops being visible), then the rest."""
    leaf_level = manifest.metadata["levels"][0]
    leaves = [k for k in keys if k.rsplit("/", 2)[-2] == leaf_level]
    yield Remove([keys[-1]])
    yield RemoveLeaves(leaves)
    yield Remove(keys[:-1])


def _warn_if_too_long(config: Config, leaves: list[Document]) -> None:
    if config.input_limit is None:
        return
    long = [d for d in leaves if config.count_tokens(d.page_content) > config.input_limit]
    if long:
        warnings.warn(
            f"{len(long)} of {len(leaves)} children exceed the embedding model's input "
            f"window of {config.input_limit} tokens and will be embedded from their "
            f"beginning only (first: {long[0].id!r}); use a smaller child splitter.",
            UserWarning,
            stacklevel=4,
        )


class ReadWriteLock:
    """Many readers or one writer, for threads and coroutines alike.

    A waiting writer holds off new readers, so a stream of queries can not
    starve an update. Coroutines wait by polling (``asyncio.sleep``), never in a
    worker thread: a reader that holds the lock may itself need the default
    executor (a sync-only store, the FAISS search) to finish. Not re-entrant.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire_read(self, *, blocking: bool = True) -> bool:
        """Take a shared hold; ``False`` if ``blocking`` is off and it is busy."""
        with self._cond:
            while self._writer or self._writers_waiting:
                if not blocking:
                    return False
                self._cond.wait()
            self._readers += 1
            return True

    def release_read(self) -> None:
        """Give a shared hold back."""
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self, *, blocking: bool = True) -> bool:
        """Take the exclusive hold; ``False`` if ``blocking`` is off and it is busy."""
        with self._cond:
            if not blocking and (self._writer or self._readers):
                return False
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
            return True

    def release_write(self) -> None:
        """Give the exclusive hold back."""
        with self._cond:
            self._writer = False
            self._cond.notify_all()

    @contextmanager
    def hold(self, *, write: bool) -> Iterator[None]:
        """``with lock.hold(write=...):`` in a thread."""
        if write:
            self.acquire_write()
        else:
            self.acquire_read()
        try:
            yield
        finally:
            self.release_write() if write else self.release_read()

    @asynccontextmanager
    async def ahold(self, *, write: bool) -> AsyncIterator[None]:
        """``async with lock.ahold(write=...):`` in a coroutine."""
        acquire = self.acquire_write if write else self.acquire_read
        delay = 0.0005
        while not acquire(blocking=False):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            self.release_write() if write else self.release_read()
