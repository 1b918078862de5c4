"""Persistence: a retriever's stores as plain files (FAISS, numpy arrays, JSON; never pickle).

A save directory holds complete snapshots and a pointer to the current one::

    path/
      CURRENT                  the name of the current snapshot (one line)
      snapshot-<time>-<rand>/
        s2b.json               format, version, configuration, checksums
        children.faiss         faiss.write_index of the child index
        children.json          its header (dimension, factory, next row id, count)
        records.*              the children's keys, text and metadata as columns
                               (:mod:`~langchain_s2b.store.vectors.records`)
        nodes.*                the docstore, when it lives in memory: nodes as spans
                               over their source's text
                               (:mod:`~langchain_s2b.store.nodes.node_store`)
        lexical/               the lexical index (tantivy's own files), with hybrid search

Loading reads these as they are: numpy arrays (``allow_pickle=False``), one
UTF-8 text file per store, FAISS's own reader, tantivy's files opened in place
(from a scratch copy): no ``Document`` is made and nothing is indexed again.
A save of format version 1 (``children.jsonl`` and ``nodes.txt``: one line of
JSON per record and per node) is read too, more slowly; saving it again
writes version 2.

``save`` holds an inter-process file lock (``path/.lock``, ``filelock``) so saves
to one path, from threads or processes, run one at a time. It writes a new
snapshot beside the old ones, flushes it to disk, reads its FAISS file back, then
replaces ``CURRENT`` with ``os.replace`` (atomic) and only then removes older
snapshots: a crash at any moment leaves a loadable save, the old or the new.
``load`` reads only JSON and FAISS files, checks every value's type, every
file's checksum, the format version and the embedding's dimension, and
refuses anything else with a ``ValueError`` that says what is wrong.

Loads and saves of one path may overlap, from any threads and processes. A
load holds a shared lock (``flock``) on the ``.readers`` file of the snapshot
``CURRENT`` names while it reads it; a save removes an old snapshot only when
it gets that lock exclusively at once, else it leaves it to a later save. So a
load never waits for a save (nor a save for a load), and it reads one complete
snapshot. A save that removes a snapshot first renames it away: a load that
read ``CURRENT`` just before the switch finds its snapshot gone once it holds
the lock, and reads ``CURRENT`` again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.stores import BaseStore
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.lifecycle import Config
from langchain_s2b.core.splitters import build_splitter, describe_splitter
from langchain_s2b.core.tree import Level
from langchain_s2b.store.base import (
    TEMP_PREFIX,
    class_name,
    fsync_and_hash,
    fsync_dir,
    write_json,
    write_text_atomic,
)
from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.snapshots.docstore_file import docstore_kind, restore_docstore, write_nodes
from langchain_s2b.store.snapshots.folder import (
    _SNAPSHOT,
    LOCK_FILE,
    POINTER,
    READERS_FILE,
    _remove_old,
    current_snapshot,
    reading,
)
from langchain_s2b.store.snapshots.settings import (
    CONFIG_FILE,
    FORMAT,
    FORMAT_VERSION,
    LEXICAL_DIR,
    NOTHING_EMBEDDED,
    _check_files,
    _probe,
    _read_config,
    _warn_if_other_model,
    check_dimension,
    check_embedded,
    embedded_setting,
    model_name,
)
from langchain_s2b.store.vectors import FaissIndex

__all__ = [
    "CONFIG_FILE",
    "LOCK_FILE",
    "NOTHING_EMBEDDED",
    "READERS_FILE",
    "Loaded",
    "Saved",
    "check_embedded",
    "current_snapshot",
    "embedded_setting",
    "load",
    "reading",
    "save",
]


@dataclass(frozen=True)
class Saved:
    """What a save holds: the two stores, the levels and the retriever's options."""

    vectorstore: VectorStore
    docstore: BaseStore[str, Document]
    levels: list[Level]
    options: dict[str, Any]
    """The retriever's options that differ from their defaults, as JSON values."""
    lexical: LexicalIndex | None = None
    """The BM25 twin of the child index (hybrid search), saved in ``lexical/``."""
    embedded: dict[str, Any] | None = None
    """What is embedded beside each leaf's text (:func:`embedded_setting`)."""


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` read: the stores to build a retriever on, its levels and options."""

    vectorstore: VectorStore
    stores: dict[str, Any]
    """``{"docstore": ...}`` or ``{"byte_store": ...}``."""
    levels: list[Level]
    options: dict[str, Any]
    lexical: LexicalIndex | None = None
    embedded: dict[str, Any] | None = None
    """The save's :func:`embedded_setting` (``None``: a save made before it was recorded)."""


# Saving ------------------------------------------------------------------------------


def save(saved: Saved, path: str | Path, *, include_docstore: bool | None = None) -> Path:
    """Write a retriever's parts into ``path`` atomically; returns the snapshot directory.

    Args:
        saved: the retriever's stores, levels and options (hold its lock while calling).
        path: a new or empty directory, or an earlier save (it is replaced).
        include_docstore: copy the docstore into the save. Default: only when it
            lives in memory; a store on disk or in a server stays where it is and
            is passed again to :func:`load`.
    """
    root = Path(path)
    _check_target(root)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / LOCK_FILE):
        _check_target(root)  # again: another save may have written meanwhile
        return _save_locked(saved, root, include_docstore)


def _save_locked(saved: Saved, root: Path, include_docstore: bool | None) -> Path:
    name = f"snapshot-{time.time_ns()}-{secrets.token_hex(4)}"
    temp = root / f"{TEMP_PREFIX}{name}"
    temp.mkdir()
    try:
        meta = _write_snapshot(saved, temp, include_docstore)
        write_json(temp / CONFIG_FILE, meta)
        (temp / READERS_FILE).touch()
        fsync_dir(temp)
        if isinstance(saved.vectorstore, FaissIndex):  # read back before it replaces anything
            FaissIndex.check_saved(temp)
        os.replace(temp, root / name)
        fsync_dir(root)
        write_text_atomic(root / POINTER, name + "\n")
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _remove_old(root, keep=name)
    return root / name


def _check_target(root: Path) -> None:
    if root.exists() and not root.is_dir():
        msg = f"Cannot save into {root}: it is a file; pass a directory path."
        raise ValueError(msg)
    if (
        root.is_dir()
        and any(not _ours(child.name) for child in root.iterdir())
        and not (root / POINTER).exists()
    ):
        msg = (
            f"Refusing to save into {root}: it is not empty and not an earlier "
            "langchain_s2b save (no CURRENT file); choose a new or empty directory."
        )
        raise ValueError(msg)


def _ours(name: str) -> bool:
    """A name a save writes (a first save that was interrupted leaves these)."""
    return name == LOCK_FILE or name.startswith(TEMP_PREFIX) or bool(_SNAPSHOT.match(name))


def _write_snapshot(saved: Saved, temp: Path, include_docstore: bool | None) -> dict[str, Any]:
    files: dict[str, str] = {}
    index = saved.vectorstore
    if isinstance(index, FaissIndex):
        for written in index.save(temp):
            files[written] = fsync_and_hash(temp / written)
        vectors: dict[str, Any] = {"kind": "faiss", "count": len(index), "dim": index.dim}
    else:
        vectors = {"kind": "external", "class": class_name(index)}
    if saved.lexical is not None:
        for written in saved.lexical.save(temp / LEXICAL_DIR):
            name = f"{LEXICAL_DIR}/{written}"
            files[name] = fsync_and_hash(temp / name)
        fsync_dir(temp / LEXICAL_DIR)
    store = saved.docstore
    kind = docstore_kind(store)
    include = kind != "external" if include_docstore is None else include_docstore
    nodes = None
    if include:
        names, nodes = write_nodes(store, temp)
        for name in names:
            files[name] = fsync_and_hash(temp / name)
    levels = saved.levels
    embedding = index.embeddings
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "embedding": {
            "class": class_name(embedding),
            "model": None if embedding is None else model_name(embedding),
            "dim": vectors.get("dim"),
            "probe": _probe(embedding) if embedding is not None and vectors.get("dim") else None,
        },
        "vectorstore": vectors,
        "docstore": {"kind": kind, "class": class_name(store), "saved": include, "count": nodes},
        "retriever": saved.options,
        "levels": [{"name": lv.name, "splitter": describe_splitter(lv)} for lv in levels],
        "fingerprint": Config(levels).fingerprint(),
        "embedded": saved.embedded or NOTHING_EMBEDDED,
        "files": files,
    }


# Loading ------------------------------------------------------------------------------


def load(
    path: str | Path,
    embedding: Embeddings,
    *,
    docstore: BaseStore[str, Document] | None = None,
    byte_store: BaseStore[str, bytes] | None = None,
    vectorstore: Any = None,
    splitters: Mapping[str, Any] | None = None,
) -> Loaded:
    """Read a save written by :func:`save`; see ``SmallToBigRetriever.load``.

    The snapshot ``CURRENT`` names is held (a shared lock) while it is read, so
    a save that finishes meanwhile leaves it in place (module docstring).
    """
    with reading(Path(path)) as snap:
        return _load(snap, embedding, docstore, byte_store, vectorstore, splitters)


def _load(
    snap: Path,
    embedding: Embeddings,
    docstore: BaseStore[str, Document] | None,
    byte_store: BaseStore[str, bytes] | None,
    vectorstore: Any,
    splitters: Mapping[str, Any] | None,
) -> Loaded:
    meta = _read_config(snap)
    _check_files(snap, meta["files"])
    dim = meta["embedding"].get("dim")
    if dim is not None:
        check_dimension(embedding, dim, meta["embedding"]["class"])
        _warn_if_other_model(embedding, meta["embedding"])
    vectorstore = _load_vectors(snap, meta, embedding, vectorstore)
    store = restore_docstore(snap, meta, docstore, byte_store)
    levels = _load_levels(meta, splitters or {})
    if Config(levels).fingerprint() != meta["fingerprint"]:
        warnings.warn(
            "The splitters passed to load() differ from the saved ones: re-adding an "
            "unchanged source will re-index it.",
            UserWarning,
            stacklevel=3,
        )
    lexical = None
    if any(name.startswith(f"{LEXICAL_DIR}/") for name in meta["files"]):
        lexical = LexicalIndex.load(snap / LEXICAL_DIR, documents=False)
    embedded = meta.get("embedded")
    return Loaded(vectorstore, store, levels, dict(meta["retriever"]), lexical, embedded)


def _load_vectors(snap: Path, meta: dict[str, Any], embedding: Embeddings, given: Any) -> Any:
    if given is not None:
        return given
    if meta["vectorstore"]["kind"] != "faiss":
        msg = (
            f"This save's child index was a {meta['vectorstore'].get('class')!r}, which "
            "save() does not copy; pass it again: load(path, embedding, vectorstore=...)."
        )
        raise ValueError(msg)
    return FaissIndex.load(snap, embedding)


def _load_levels(meta: dict[str, Any], splitters: Mapping[str, Any]) -> list[Level]:
    levels = []
    for spec in meta["levels"]:
        name = spec["name"]
        splitter = splitters.get(name) or build_splitter(spec["splitter"], name)
        levels.append(Level(name, splitter))
    unknown = sorted(set(splitters) - {lv.name for lv in levels})
    if unknown:
        names = [lv.name for lv in levels]
        msg = f"splitters= names unknown levels {unknown}; the saved levels are {names}."
        raise ValueError(msg)
    return levels
