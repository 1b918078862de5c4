"""``s2b index``: files -> documents -> vectors -> one transaction per group of files.

A run (under the writer lock):

1. compares every file with what the index recorded (size and mtime, then the
   SHA-256 of its bytes) and reads only new and changed files; a file that can
   not be read is skipped and reported (``--strict``: the run stops there,
   before anything is written);
2. removes the files that left a given folder, and the files that moved (gone
   from disk, same bytes found at a new path);
3. splits the changed files (cheap) to learn every chunk to embed, drops the
   chunks whose vectors are stored already (content hash), and embeds the rest
   shortest first in batches across files, each batch committed at once, so
   Ctrl-C keeps what was embedded and the next run embeds only the rest;
4. writes groups of files, each in one transaction: their sources (nodes,
   manifests, child vectors) and the indexed-file records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.index_dir import INDEX_MODE, FileRow, Store
from langchain_s2b.cli.loaders import (
    Found,
    SkippedFile,
    check_unique,
    file_digest,
    read_documents,
)
from langchain_s2b.core.ingest import source_id_of
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.faiss_index import FaissIndex

GROUP_CHARS = 250_000
"""Text per write transaction (a larger file is a group of its own)."""
EMBED_BATCH = 64
"""Chunks per embedding call and per committed batch of vectors."""


@dataclass
class Outcome:
    """What one ``s2b index`` run did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    documents: int = 0
    chunks: int = 0
    """Chunks of the new and changed files."""
    embedded: int = 0
    """Chunks embedded by this run (the rest of ``chunks`` reused stored vectors)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(path, reason)`` of files that could not be read."""


@dataclass
class _Loaded:
    path: Path
    stat: os.stat_result
    sha256: str
    docs: list[Document]
    sources: list[str]
    new: bool
    texts: list[str] = field(default_factory=list)


class _Recorder(Embeddings):
    """Records the passages a retriever would embed (the planning pass)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [[1.0]] * len(texts)

    def embed_query(self, text: str) -> list[float]:
        return [1.0]


def leaf_texts(docs: Sequence[Document]) -> list[str]:
    """The chunks the index will embed for ``docs`` (split exactly as it splits them).

    The planning retriever has no lexical index (``hybrid=False``): it only
    splits, and a BM25 index built and committed per file cost ~12 ms a file
    (5% of ``s2b index`` on a folder of paragraphs) for nothing.
    """
    recorder = _Recorder()
    planner = SmallToBigRetriever(vectorstore=FaissIndex(recorder), mode=INDEX_MODE, hybrid=False)
    planner.add_documents(docs)
    return recorder.texts


def run(
    store: Store,
    found: Found,
    *,
    strict: bool,
    on_skip: Callable[[str, str], None],
    progress: Callable[[int], Any],
) -> Outcome:
    """Bring the index in line with the files ``found``; see the module docstring."""
    outcome = Outcome()
    stored = store.files()
    loaded, touched = _read_changed(store, found, stored, outcome, strict, on_skip)
    gone = _gone(found, stored, loaded)
    claimed = {sid: path for path, row in stored.items() if path not in gone for sid in row.sources}
    accepted = []
    for item in loaded:
        clash = next(
            (s for s in item.sources if claimed.get(s, str(item.path)) != str(item.path)), None
        )
        if clash is not None:
            _skip(
                outcome,
                str(item.path),
                f"document id {clash!r} is also in {claimed[clash]}",
                strict,
                on_skip,
            )
            continue
        claimed.update(dict.fromkeys(item.sources, str(item.path)))
        accepted.append(item)
    for item in accepted:
        item.texts = leaf_texts(item.docs)
        outcome.chunks += len(item.texts)
        outcome.documents += len(item.docs)
    todo = set(store.cache.missing([t for item in accepted for t in item.texts]))
    bar = progress(len(todo))
    try:
        _remove(store, [stored[p] for p in sorted(gone)], claimed)
        outcome.removed = len(gone)
        for group in _groups(accepted):
            outcome.embedded += _embed(store, group, todo, bar)
            _write(store, group, stored)
            for item in group:
                if item.new:
                    outcome.added += 1
                else:
                    outcome.updated += 1
        with store.db.write():
            for row in touched:
                store.put_file(row)
        store.cache.collect_garbage(store.index.released)
    finally:
        bar.close()
    return outcome


def _skip(
    outcome: Outcome, path: str, reason: str, strict: bool, on_skip: Callable[[str, str], None]
) -> None:
    if strict:
        msg = f"cannot index {path}: {reason} (--strict stops at the first such file)"
        raise UserError(msg)
    outcome.skipped.append((path, reason))
    on_skip(path, reason)


def _read_changed(
    store: Store,
    found: Found,
    stored: dict[str, FileRow],
    outcome: Outcome,
    strict: bool,
    on_skip: Callable[[str, str], None],
) -> tuple[list[_Loaded], list[FileRow]]:
    """Read new and changed files; rows of files whose bytes did not change (touched)."""
    loaded: list[_Loaded] = []
    touched: list[FileRow] = []
    for path in found.files:
        key = str(path)
        try:
            stat = path.stat()
            row = stored.get(key)
            if row and (row.size, row.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                outcome.unchanged += 1
                continue
            data = path.read_bytes()
        except OSError as err:
            _skip(outcome, key, err.strerror or str(err), strict, on_skip)
            continue
        sha = file_digest(data)
        if row and row.sha256 == sha:
            outcome.unchanged += 1
            touched.append(
                FileRow(key, stat.st_size, stat.st_mtime_ns, sha, row.sources, row.chunks)
            )
            continue
        try:
            docs = [doc for doc in read_documents(path, data) if doc.page_content.strip()]
            check_unique(docs)
        except SkippedFile as err:
            _skip(outcome, key, str(err), strict, on_skip)
            continue
        sources = [source_id_of(doc, None, []) for doc in docs]
        loaded.append(_Loaded(path, stat, sha, docs, sources, row is None))
    return loaded, touched


def _gone(found: Found, stored: dict[str, FileRow], loaded: list[_Loaded]) -> set[str]:
    """Indexed files to remove: no longer in a given folder, or moved to a new path."""
    present = {str(p) for p in found.files}
    folders = [str(f) for f in found.folders]
    moved_bytes = {item.sha256 for item in loaded}
    gone = set()
    for path, row in stored.items():
        if path in present:
            continue
        in_folder = any(path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)
        moved = row.sha256 in moved_bytes and not os.path.exists(path)
        if in_folder or moved:
            gone.add(path)
    return gone


def _remove(store: Store, rows: list[FileRow], claimed: dict[str, str]) -> None:
    """Delete the sources of removed files (those no other file now holds)."""
    if not rows:
        return
    with store.db.write():
        sources = [s for row in rows for s in row.sources if s not in claimed]
        store.retriever.delete(sources)
        for row in rows:
            store.drop_file(row.path)


def _groups(items: list[_Loaded]) -> list[list[_Loaded]]:
    groups: list[list[_Loaded]] = [[]]
    size = 0
    for item in items:
        length = sum(len(d.page_content) for d in item.docs)
        if groups[-1] and size + length > GROUP_CHARS:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += length
    return [g for g in groups if g]


def _embed(store: Store, group: list[_Loaded], todo: set[str], bar: Any) -> int:
    """Embed the group's chunks that have no stored vector, shortest first, batch by batch."""
    wanted = sorted({t for item in group for t in item.texts if t in todo}, key=len)
    for start in range(0, len(wanted), EMBED_BATCH):
        batch = wanted[start : start + EMBED_BATCH]
        store.cache.embed_missing(batch)
        todo.difference_update(batch)
        bar.update(len(batch))
    return len(wanted)


def _write(store: Store, group: list[_Loaded], stored: dict[str, FileRow]) -> None:
    """One transaction: the group's sources, the sources its files no longer hold, file rows."""
    with store.db.write():
        stale = []
        for item in group:
            old = stored.get(str(item.path))
            if old is not None:
                stale += [s for s in old.sources if s not in set(item.sources)]
        if stale:
            store.retriever.delete(stale)
        store.retriever.add_documents([doc for item in group for doc in item.docs])
        for item in group:
            row = FileRow(
                str(item.path),
                item.stat.st_size,
                item.stat.st_mtime_ns,
                item.sha256,
                item.sources,
                len(item.texts),
            )
            store.put_file(row)
