"""``s2b index``: files -> documents -> vectors -> one transaction per group of files.

A run (under the writer lock):

1. compares every file with what the index recorded (size and mtime, then the
   SHA-256 of its bytes) and reads only new and changed files; a file that can
   not be read is skipped and reported (``--strict``: the run stops there,
   before anything is written);
2. removes the files that left a given folder, and the files that no longer
   exist (a moved file is known again by its new path; its vectors are reused);
3. gives each document to the files that hold it: a document found in several
   files (the same JSONL row) is stored once and stays while one of them holds
   it; one id with different text or metadata in two files skips the later file;
4. with a context model, has it write each new paragraph's context (cached in
   the database by digest as they come, so Ctrl-C keeps them); a file whose
   contexts fail is skipped and reported, like a file that can not be read;
   with model-written proxies (``--proxies``), the same for the proxy model's
   answers (the write's ``write_proxies`` hook then finds them cached);
5. splits the changed files (cheap) to learn every chunk to embed (its text,
   with its header and context when the store writes them), drops the
   chunks whose vectors are stored already (content hash), and embeds the rest
   shortest first in batches across files, each batch committed at once, so
   Ctrl-C keeps what was embedded and the next run embeds only the rest;
6. writes groups of files, each in one transaction: their sources (nodes,
   manifests, child vectors) and the indexed-file records.

A run after the headers or context setting changed (:func:`~.folder.reindex_pending`)
reads every indexed file again, whatever its size and time say, and keeps the
vectors the old setting leaves unused (turning the setting back embeds
nothing); the mark goes when a run has re-indexed every file.

Counts: a *document* is a source (a text file, a PDF page, a JSONL row), a
*chunk* a leaf the index searches (a sentence), a *vector* a distinct chunk
text with its stored embedding (identical chunks share one).
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from langchain_core.documents import Document

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.folder import finish_reindex
from langchain_s2b.cli.index_dir import INDEX_MODE, FileRow, Store
from langchain_s2b.cli.loaders import (
    Found,
    SkippedFile,
    check_name,
    file_digest,
    read_documents,
    read_file,
    shown,
)
from langchain_s2b.cli.progress import Bar, ticking
from langchain_s2b.core import propose
from langchain_s2b.core.headers import HeaderFunction
from langchain_s2b.core.ingest import (
    Source,
    identify,
    is_empty,
    leaf_texts_and_nodes,
    nodes_key,
    source_id_of,
)
from langchain_s2b.core.keys import encode_source_key, manifest_key, node_key
from langchain_s2b.core.situate import leaf_contexts, pieces
from langchain_s2b.core.splitters import default_levels
from langchain_s2b.core.tree import DOC_LEVEL, build_tree, split_part, split_progress, user_metadata
from langchain_s2b.store.nodes import ContextFailedError, ContextWriter

GROUP_CHARS = 250_000
"""Text per write transaction (a larger file is a group of its own)."""
EMBED_BATCH = 64
"""Chunks per embedding call and per committed batch of vectors."""
LEVELS = default_levels(INDEX_MODE, None, None)
"""The store's levels (its retriever's, as :class:`~.index_dir.Store` makes it)."""

Progress = Callable[[int, str, str], Bar]
"""``progress(total, unit, what)``: a progress bar for one phase of the run."""


@dataclass
class Outcome:
    """What one ``s2b index`` run did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    documents: int = 0
    """Distinct documents of the new and changed files."""
    chunks: int = 0
    """Their chunks (leaves the index searches)."""
    vectors: int = 0
    """Their distinct chunk texts, each one stored vector."""
    embedded: int = 0
    """Vectors embedded by this run (the rest of ``vectors`` were stored already)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(path, reason)`` of files that could not be read."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """``(path, note)`` of files read, about which their reader reported problems."""


@dataclass
class _Loaded:
    path: Path
    stat: os.stat_result
    sha256: str
    docs: list[Document]
    sources: list[str]
    new: bool
    texts: list[str] = field(default_factory=list)
    chunks: dict[str, int] = field(default_factory=dict)
    """Source id -> its chunks."""
    nodes: dict[str, int] = field(default_factory=dict)
    """Source id -> the nodes of its span tree (sentences, paragraphs, sections, itself)."""


def plan(
    docs: Sequence[Document],
    headers: bool | HeaderFunction = False,
    contexts: ContextWriter | None = None,
    context_name: str = "",
) -> tuple[list[str], dict[str, int]]:
    """The distinct chunk texts the index will embed for ``docs``, and each source's chunks.

    Split exactly as the store splits them (:func:`~langchain_s2b.core.ingest.leaf_texts`
    with the store's levels, ``headers`` and the ``contexts`` its model wrote, known
    by ``context_name``), making no node document, no vector and no lexical index.
    """
    texts, chunks, _ = _plan_file(docs, headers, contexts, context_name)
    return texts, chunks


def _plan_file(
    docs: Sequence[Document],
    headers: bool | HeaderFunction,
    contexts: ContextWriter | None,
    context_name: str,
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """:func:`plan`, and each source's nodes; each split's progress told in characters."""
    texts: dict[str, None] = {}
    chunks: dict[str, int] = {}
    nodes: dict[str, int] = {}
    sources = [s for s in identify(docs, None, [], "") if not is_empty(s)]
    total = max(1, sum(len(s.doc.page_content) for s in sources))
    done = 0
    for source in sources:
        size = len(source.doc.page_content)
        with split_part(done / total, (done + size) / total):
            written = None if contexts is None else _contexts(source, contexts, context_name)
            leaves, nodes[source.source_id] = leaf_texts_and_nodes(source, LEVELS, headers, written)
        done += size
        chunks[source.source_id] = len(leaves)
        texts.update(dict.fromkeys(leaves))
    return (
        list(texts),
        {sid: n for sid, n in chunks.items() if n},
        {sid: n for sid, n in nodes.items() if chunks[sid]},
    )


def leaf_texts(docs: Sequence[Document]) -> list[str]:
    """The distinct chunk texts the index will embed for ``docs`` (see :func:`plan`)."""
    return plan(docs)[0]


def _contexts(source: Source, writer: ContextWriter, name: str) -> list[str]:
    """Each leaf's context (the model's, or the cache's), by split id."""
    text = source.doc.page_content
    tree = build_tree(text, source.source_key, LEVELS)
    found, owner = pieces(source.source_id, text, tree, name)
    answers = writer.write(found)
    return leaf_contexts(found, owner, dict(zip((p.key for p in found), answers, strict=True)))


def run(
    store: Store,
    found: Found,
    *,
    strict: bool,
    on_skip: Callable[[str, str], None],
    progress: Progress,
    on_note: Callable[[str, str], None] | None = None,
    prune: bool = True,
    save: bool = False,
) -> Outcome:
    """Bring the index in line with the files ``found``; see the module docstring.

    ``prune=False``: remove no indexed file (only read ``found.files`` again).
    ``save``: then write the FAISS file of the state the run leaves (a phase of
    its own, with its progress), when the run changed anything.
    """
    outcome = Outcome()
    stored = store.files()
    again = store.reindex_pending()
    if again:  # a changed setting: every indexed file is read again
        found = _with_indexed(found, stored)
    report = _Report(strict, on_skip, on_note)
    loaded, touched = _read_changed(store, found, stored, outcome, report, progress, again=again)
    if store.contexts is not None:
        name = store.embedded.context_model or ""
        loaded = _situate(store.contexts, name, loaded, outcome, report, progress)
    if store.proxies is not None and store.embedded.proxies:
        kind, name = store.embedded.proxies, store.embedded.proxy_model or ""
        loaded = _propose(store.proxies, kind, name, loaded, outcome, report, progress)
    gone = _gone(found, stored) if prune else set()
    accepted, holders = _claim(store, stored, gone, loaded, outcome, strict, on_skip)
    nodes = _plan(store, accepted, outcome, progress)
    todo = set(store.cache.missing([t for item in accepted for t in item.texts]))
    bar = progress(len(todo), "vector", "embedding")
    groups = _groups(accepted)
    chars = sum(len(d.page_content) for g in groups for d in _group_documents(g).values())
    writing = _WritePhase(
        _Splits(lambda: progress(chars, "character", "writing 1/3 (splitting)"), chars),
        _Writing(lambda: progress(nodes, "node", "writing 2/3 (text)")),
        _Writing(lambda: progress(outcome.chunks, "chunk", "writing 3/3 (vectors)")),
    )
    store.index.on_add = writing.vectors.added
    store.docstore.on_put = writing.put
    try:
        _remove(store, [stored[p] for p in sorted(gone)], holders)
        outcome.removed = len(gone)
        for group in groups:
            outcome.embedded += _embed(store, group, todo, bar)
            _write(store, group, stored, holders, writing)
            for item in group:
                if item.new:
                    outcome.added += 1
                else:
                    outcome.updated += 1
        with store.db.write():
            for row in touched:
                store.put_file(row)
            if again and not outcome.skipped:
                finish_reindex(store.db)
        if not again:  # the other setting's vectors stay: turning it back embeds nothing
            store.cache.collect_garbage(store.index.released)
    finally:
        store.index.on_add = None
        store.docstore.on_put = None
        bar.close()
        writing.close()
    if save and (outcome.added or outcome.updated or outcome.removed):
        _save(store, progress)
    return outcome


@dataclass
class _WritePhase:
    """The writing phase's three steps, each with a count that moves as it goes.

    Each group of files is written in one transaction: its sources split again
    (in characters), the nodes of their span trees stored (sentences,
    paragraphs, sections, documents: batches of 2,048), then their chunks'
    vectors added (batches of 2,048). One large file is minutes of the first
    two alone; a count in chunks only would stand at 0 through them.
    """

    splits: _Splits
    text: _Writing
    vectors: _Writing

    def start(self, group: list[_Loaded], docs: dict[str, Document]) -> None:
        """A group begins."""
        self.splits.expect([len(d.page_content) for d in docs.values()])
        self.text.start({s: n for item in group for s, n in item.nodes.items()})
        self.vectors.start({s: n for item in group for s, n in item.chunks.items()})

    def put(self, nodes: int) -> None:
        """The docstore stored ``nodes``: the splitting is over."""
        self.splits.settle()
        self.text.added(nodes)

    def finish(self) -> None:
        """The group's transaction committed."""
        self.splits.settle()
        self.text.finish()
        self.vectors.finish()

    def close(self) -> None:
        """The writing is over."""
        for step in (self.splits, self.text, self.vectors):
            step.close()


class _Splits:
    """Progress in characters, moved by each split as it goes (:func:`split_progress`).

    ``expect`` the lengths of the texts about to be split, in order: each split
    (a span tree built) tells its share, the last 1.0; ``settle`` when the step
    is over counts what was not split (an unchanged source, a split not told).
    """

    def __init__(self, make: Callable[[], Bar], total: int) -> None:
        self.make = make
        self.bar: Bar | None = None
        self.step = max(1, total // 1000)  # a bar redrawn per paragraph would cost seconds
        self.lengths: deque[int] = deque()
        self.base = self.shown = 0

    def expect(self, lengths: list[int]) -> None:
        """Texts of these lengths are split next, in this order."""
        if self.bar is None:
            self.bar = self.make()
        self.lengths.extend(lengths)

    def report(self, share: float) -> None:
        """The text being split is ``share`` done (1.0: the next one comes)."""
        if not self.lengths:
            return
        position = self.base + int(share * self.lengths[0])
        if share >= 1.0:
            self.base += self.lengths.popleft()
        self._show(position)

    def whole(self, share: float) -> None:
        """Every text expected is ``share`` done (a caller that splits them as one)."""
        self._show(self.base + int(share * sum(self.lengths)))

    def settle(self) -> None:
        """Every text expected is split."""
        self.base += sum(self.lengths)
        self.lengths.clear()
        self._show(self.base, force=True)

    def _show(self, position: int, *, force: bool = False) -> None:
        moved = position - self.shown
        if self.bar is not None and moved > 0 and (force or moved >= self.step):
            self.bar.update(moved)
            self.shown = position

    def close(self) -> None:
        """The step is over."""
        if self.bar is not None:
            self.bar.close()


class _Writing:
    """One step's progress, in chunks or nodes: each group's count is reached exactly once.

    The store tells each batch it writes (:attr:`SQLiteFaissIndex.on_add`,
    :attr:`SQLiteDocStore.on_put`); a group whose sources were written already
    (shared) or were unchanged writes fewer, and the rest is counted when its
    transaction commits.
    """

    def __init__(self, make: Callable[[], Bar]) -> None:
        self.make = make
        self.bar: Bar | None = None
        """Made when the step first writes (its elapsed time is the step's)."""
        self.counted: set[str] = set()
        self.expected = 0
        self.done = 0

    def start(self, chunks: dict[str, int]) -> None:
        """A group begins: its sources' chunks not counted by an earlier group."""
        fresh = {s: n for s, n in chunks.items() if s not in self.counted}
        self.counted.update(fresh)
        self.expected, self.done = sum(fresh.values()), 0

    def added(self, leaves: int) -> None:
        """The store wrote ``leaves`` (chunks, or nodes)."""
        if self.bar is None:  # made when the step first writes: its elapsed time is the step's
            self.bar = self.make()
        step = min(leaves, self.expected - self.done)
        if step > 0:
            self.done += step
            self.bar.update(step)

    def finish(self) -> None:
        """The group's transaction committed."""
        self.added(self.expected - self.done)

    def close(self) -> None:
        """The writing is over."""
        if self.bar is not None:
            self.bar.close()


def _save(store: Store, progress: Progress) -> None:
    """The FAISS file of the state the run leaves, as a phase of its own (one write)."""
    vectors = len(store.index)
    bar = progress(vectors, "vector", "writing the FAISS file")
    try:
        with ticking(bar):
            store.save_index()
        bar.update(vectors)
    finally:
        bar.close()


@dataclass
class _Report:
    strict: bool
    on_skip: Callable[[str, str], None]
    on_note: Callable[[str, str], None] | None


def _skip(
    outcome: Outcome, path: str, reason: str, strict: bool, on_skip: Callable[[str, str], None]
) -> None:
    if strict:
        msg = f"cannot index {path}: {reason} (--strict stops at the first such file)"
        raise UserError(msg)
    outcome.skipped.append((path, reason))
    on_skip(path, reason)


def _with_indexed(found: Found, stored: dict[str, FileRow]) -> Found:
    """``found`` and every other indexed file still on disk (to index again)."""
    listed = {str(p) for p in found.files}
    extra = [Path(p) for p in stored if p not in listed and _exists(p)]
    return dataclasses.replace(found, files=[*found.files, *extra])


def _situate(
    writer: ContextWriter,
    name: str,
    loaded: list[_Loaded],
    outcome: Outcome,
    report: _Report,
    progress: Progress,
) -> list[_Loaded]:
    """Have the context model write the contexts of the files read; skip a file it fails on."""

    def situate(source: Source) -> None:
        _contexts(source, writer, name)

    return _ask_model(situate, "writing contexts", loaded, outcome, report, progress)


def _propose(
    writer: ContextWriter,
    kind: str,
    name: str,
    loaded: list[_Loaded],
    outcome: Outcome,
    report: _Report,
    progress: Progress,
) -> list[_Loaded]:
    """Have the proxy model write the files' proxies; skip a file it fails on.

    They go into the cache, where the write's ``write_proxies`` finds them.
    """

    def write(source: Source) -> None:
        text = source.doc.page_content
        tree = build_tree(text, source.source_key, LEVELS)
        writer.write(propose.pieces(source.source_id, text, tree, kind, name))

    return _ask_model(write, "writing proxies", loaded, outcome, report, progress)


def _ask_model(
    write: Callable[[Source], None],
    what: str,
    loaded: list[_Loaded],
    outcome: Outcome,
    report: _Report,
    progress: Progress,
) -> list[_Loaded]:
    """``write`` each source of the files read (a model's calls); skip a file it fails on."""
    kept = []
    bar = progress(len(loaded), "file", what)
    try:
        with ticking(bar):
            for item in loaded:
                try:
                    for source in identify(item.docs, None, [], ""):
                        if not is_empty(source):
                            write(source)
                except ContextFailedError as err:
                    _skip(outcome, str(item.path), str(err), report.strict, report.on_skip)
                else:
                    kept.append(item)
                bar.update(1)
    finally:
        bar.close()
    return kept


def _read_changed(
    store: Store,
    found: Found,
    stored: dict[str, FileRow],
    outcome: Outcome,
    report: _Report,
    progress: Progress,
    *,
    again: bool = False,
) -> tuple[list[_Loaded], list[FileRow]]:
    """Read new and changed files; rows of files whose bytes did not change (touched).

    ``again``: every file is read and indexed again, changed or not.
    """
    loaded: list[_Loaded] = []
    touched: list[FileRow] = []
    bar = progress(len(found.files), "file", "reading")
    try:
        for path in found.files:
            bar.update(1)
            key = str(path)
            try:
                check_name(path)
                stat = path.stat()
                row = stored.get(key)
                same = row and (row.size, row.mtime_ns) == (stat.st_size, stat.st_mtime_ns)
                if same and not again:
                    outcome.unchanged += 1
                    continue
                data = read_file(path)
            except SkippedFile as err:
                _skip(
                    outcome,
                    shown(path),
                    str(err),
                    report.strict,
                    report.on_skip,
                )
                continue
            except OSError as err:
                _skip(outcome, key, err.strerror or str(err), report.strict, report.on_skip)
                continue
            sha = file_digest(data)
            if row and row.sha256 == sha and not again:
                outcome.unchanged += 1
                touched.append(
                    FileRow(key, stat.st_size, stat.st_mtime_ns, sha, row.sources, row.chunks)
                )
                continue
            try:
                docs, sources = _documents(path, data, outcome, report)
            except SkippedFile as err:
                _skip(outcome, key, str(err), report.strict, report.on_skip)
                continue
            loaded.append(_Loaded(path, stat, sha, docs, sources, row is None))
    finally:
        bar.close()
    return loaded, touched


def _documents(
    path: Path, data: bytes, outcome: Outcome, report: _Report
) -> tuple[list[Document], list[str]]:
    """A file's documents with text, and their source ids; :class:`SkippedFile` if unusable."""
    notes: list[str] = []
    docs = [doc for doc in read_documents(path, data, notes) if _has_text(doc.page_content)]
    try:
        identify(docs, None, [], "")  # what add_documents will refuse, refused for this file
    except (TypeError, ValueError) as err:
        raise SkippedFile(str(err)) from None
    for note in notes:
        outcome.notes.append((str(path), note))
        if report.on_note is not None:
            report.on_note(str(path), note)
    return docs, [source_id_of(doc, None, []) for doc in docs]


def _has_text(text: str) -> bool:
    """Not empty, nor only whitespace (``text.strip()`` without a copy of a large text)."""
    return bool(text) and not text.isspace()


def _gone(found: Found, stored: dict[str, FileRow]) -> set[str]:
    """Indexed files to remove: no longer in a given folder, or no longer on disk."""
    present = {str(p) for p in found.files}
    folders = [str(f).rstrip(os.sep) + os.sep for f in found.folders]
    return {
        path
        for path in stored
        if path not in present and (path.startswith(tuple(folders)) or not _exists(path))
    }


def _exists(path: str) -> bool:
    """Whether ``path`` is there (a disk that can not say, e.g. no permission, counts as yes)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _claim(
    store: Store,
    stored: dict[str, FileRow],
    gone: set[str],
    loaded: list[_Loaded],
    outcome: Outcome,
    strict: bool,
    on_skip: Callable[[str, str], None],
) -> tuple[list[_Loaded], dict[str, set[str]]]:
    """The files whose documents may be written, and source id -> the files that hold it.

    A document already held by another file must be the same document (text
    and metadata): it is then shared; else the later file is skipped.
    """
    reread = {str(item.path) for item in loaded}
    holders: dict[str, set[str]] = {}
    for path, row in stored.items():
        if path not in gone and path not in reread:
            for sid in row.sources:
                holders.setdefault(sid, set()).add(path)
    seen: dict[str, Document] = {}
    accepted = []
    for item in loaded:
        clash = _clash(store, item, holders, seen)
        key = str(item.path)
        if clash is not None:
            _skip(outcome, key, clash, strict, on_skip)
            old = stored.get(key)
            for sid in old.sources if old else []:  # its indexed version stays
                holders.setdefault(sid, set()).add(key)
            continue
        for doc, sid in zip(item.docs, item.sources, strict=True):
            seen.setdefault(sid, doc)
            holders.setdefault(sid, set()).add(key)
        accepted.append(item)
    return accepted, holders


def _clash(
    store: Store, item: _Loaded, holders: dict[str, set[str]], seen: dict[str, Document]
) -> str | None:
    """Why ``item`` can not be written (a document id held with other content), or None."""
    for doc, sid in zip(item.docs, item.sources, strict=True):
        others = sorted(holders.get(sid, set()) - {str(item.path)})
        if not others:
            continue
        held = seen.get(sid) or _stored_document(store, sid)
        if held is None or (held.page_content, held.metadata) != (doc.page_content, doc.metadata):
            return f"document id {sid!r} is also in {others[0]}, with other text or metadata"
    return None


def _stored_document(store: Store, sid: str) -> Document | None:
    """A source as it is stored: its text and its own metadata."""
    (manifest,) = store.docstore.mget([manifest_key(encode_source_key(sid))])
    if manifest is None:
        return None
    (doc,) = store.docstore.mget([node_key(nodes_key(manifest), DOC_LEVEL, 0)])
    if doc is None:
        return None
    return Document(page_content=doc.page_content, metadata=user_metadata(doc.metadata))


def _plan(store: Store, accepted: list[_Loaded], outcome: Outcome, progress: Progress) -> int:
    """Split the accepted files; count documents, chunks and vectors once each; the nodes.

    Progress in characters, told as each file is split (one large file is a long step).
    """
    chunks: dict[str, int] = {}
    nodes: dict[str, int] = {}
    texts: set[str] = set()
    total = sum(len(d.page_content) for item in accepted for d in item.docs)
    splits = _Splits(lambda: progress(total, "character", "splitting"), total)
    try:
        for item in accepted:
            splits.expect([sum(len(d.page_content) for d in item.docs)])
            with split_progress(splits.whole):
                item.texts, item.chunks, item.nodes = _plan_file(
                    item.docs,
                    store.embedded.headers,
                    store.contexts,
                    store.embedded.context_model or "",
                )
            splits.settle()
            chunks.update(item.chunks)
            nodes.update(item.nodes)
            texts.update(item.texts)
            chunks.update(dict.fromkeys((s for s in item.sources if s not in chunks), 0))
    finally:
        splits.close()
    outcome.documents = len(chunks)
    outcome.chunks = sum(chunks.values())
    outcome.vectors = len(texts)
    return sum(nodes.values())


def _remove(store: Store, rows: list[FileRow], holders: dict[str, set[str]]) -> None:
    """Delete the sources of removed files (those no other file now holds)."""
    if not rows:
        return
    with store.db.write():
        sources = [s for row in rows for s in row.sources if not holders.get(s)]
        store.retriever.delete(list(dict.fromkeys(sources)))
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


def _embed(store: Store, group: list[_Loaded], todo: set[str], bar: Bar) -> int:
    """Embed the group's chunks that have no stored vector, shortest first, batch by batch."""
    wanted = sorted({t for item in group for t in item.texts if t in todo}, key=len)
    for item in group:
        item.texts = []  # the write splits again; the texts are not held past their embedding
    for start in range(0, len(wanted), EMBED_BATCH):
        batch = wanted[start : start + EMBED_BATCH]
        store.cache.embed_missing(batch)
        todo.difference_update(batch)
        bar.update(len(batch))
    return len(wanted)


def _group_documents(group: list[_Loaded]) -> dict[str, Document]:
    """The group's documents by source id (a document several of its files hold: once)."""
    docs: dict[str, Document] = {}
    for item in group:
        for doc, sid in zip(item.docs, item.sources, strict=True):
            docs.setdefault(sid, doc)
    return docs


def _write(
    store: Store,
    group: list[_Loaded],
    stored: dict[str, FileRow],
    holders: dict[str, set[str]],
    writing: _WritePhase,
) -> None:
    """One transaction: the group's sources, the sources its files no longer hold, file rows.

    The nodes and leaves of a large file go in batches inside it (``lifecycle``),
    so memory stays bounded and progress is told as they go.
    """
    docs = _group_documents(group)
    writing.start(group, docs)
    with store.db.write(), split_progress(writing.splits.report):
        stale: list[str] = []
        for item in group:
            old = stored.get(str(item.path))
            if old is not None:
                new = set(item.sources)
                stale += [s for s in old.sources if s not in new and not holders.get(s)]
        if stale:
            store.retriever.delete(list(dict.fromkeys(stale)))
        store.index.make_room(sum({s: n for i in group for s, n in i.chunks.items()}.values()))
        store.retriever.add_documents(list(docs.values()))
        for item in group:
            row = FileRow(
                str(item.path),
                item.stat.st_size,
                item.stat.st_mtime_ns,
                item.sha256,
                item.sources,
                sum(item.chunks.get(s, 0) for s in item.sources),
            )
            store.put_file(row)
    writing.finish()
