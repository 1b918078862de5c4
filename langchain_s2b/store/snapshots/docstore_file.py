"""The docstore in a snapshot: written as node columns, read back into any store.

Version 1 kept it as a file of lines (the key as JSON, a tab, the document as
JSON); :func:`read_nodes` still reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore, InMemoryByteStore, InMemoryStore

from langchain_s2b.store.nodes import (
    DocumentCodecStore,
    NodeStore,
    copy_into,
    decode_document,
    encode_document,
)
from langchain_s2b.store.snapshots.settings import LEGACY_NODES_FILE

__all__ = ["BATCH", "docstore_kind", "write_nodes", "batches", "restore_docstore", "read_nodes"]


BATCH = 1000
"""Keys per ``mget``/``mset`` while copying."""


def docstore_kind(store: BaseStore[str, Document]) -> str:
    """``nodes`` / ``memory`` / ``memory-bytes`` (copied into a save) or ``external``."""
    if type(store) is NodeStore:
        return "nodes"
    if type(store) is InMemoryStore:
        return "memory"
    if isinstance(store, DocumentCodecStore) and type(store.byte_store) is InMemoryByteStore:
        return "memory-bytes"
    return "external"


def write_nodes(store: BaseStore[str, Document], directory: Path) -> tuple[list[str], int]:
    """Write a docstore's documents as node columns; the file names and the document count.

    A :class:`NodeStore` writes its columns as they are; any other store is
    read through ``mget`` into one first.
    """
    columns = store if isinstance(store, NodeStore) else copy_into(store)
    return columns.write(directory)


def batches(keys: Iterator[str]) -> Iterator[list[str]]:
    """Keys in lists of :data:`BATCH`."""
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def restore_docstore(
    snap: Path,
    meta: dict[str, Any],
    docstore: BaseStore[str, Document] | None,
    byte_store: BaseStore[str, bytes] | None,
) -> dict[str, Any]:
    """The store to load into (given, or a new in-memory one), filled from the snapshot.

    Returns the retriever field to set: ``{"docstore": ...}`` or ``{"byte_store": ...}``.
    A store in memory (the default) is the snapshot's :class:`NodeStore` itself,
    opened from its columns; a store passed in is filled document by document.
    """
    info = meta["docstore"]
    if docstore is not None and byte_store is not None:
        msg = "Pass docstore= or byte_store= to load(), not both."
        raise ValueError(msg)
    if docstore is None and byte_store is None and not info["saved"]:
        msg = (
            f"This save did not copy its docstore (a {info.get('class')!r}, which keeps "
            "its own data); pass it again: load(path, embedding, byte_store=...) or "
            "docstore=...."
        )
        raise ValueError(msg)
    if not info["saved"]:
        return {"docstore": docstore} if docstore is not None else {"byte_store": byte_store}
    if meta["format_version"] == 1:
        nodes = NodeStore()
        _fill(nodes, ((key, doc) for key, _, doc in read_nodes(snap / LEGACY_NODES_FILE)))
    else:
        nodes = NodeStore.read(snap)
    if docstore is None and byte_store is None:
        if info["kind"] != "memory-bytes":
            return {"docstore": nodes}
        byte_store = InMemoryByteStore()
    if byte_store is not None:
        pairs = ((key, encode_document(doc)) for key, doc in _documents(nodes))
        _fill(byte_store, pairs)
        return {"byte_store": byte_store}
    assert docstore is not None
    _fill(docstore, _documents(nodes))
    return {"docstore": docstore}


def _documents(nodes: NodeStore) -> Iterator[tuple[str, Document]]:
    for batch in batches(nodes.yield_keys()):
        for key, doc in zip(batch, nodes.mget(batch), strict=True):
            if doc is not None:
                yield key, doc


def _fill(sink: BaseStore[str, Any], pairs: Iterator[tuple[str, Any]]) -> None:
    batch: list[tuple[str, Any]] = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) == BATCH:
            sink.mset(batch)
            batch = []
    sink.mset(batch)


def read_nodes(file: Path) -> Iterator[tuple[str, bytes, Document]]:
    """``(key, raw JSON, document)`` per line; every document is decoded and checked."""
    if not file.is_file():
        msg = f"{file} is missing; the save is incomplete or damaged."
        raise ValueError(msg)
    with file.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            head, tab, raw = line.rstrip(b"\n").partition(b"\t")
            try:
                key = json.loads(head)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                key = None
            if not tab or not isinstance(key, str):
                msg = f"{file}, line {number}: expected a JSON string key, a tab and a document."
                raise ValueError(msg)
            yield key, raw, decode_document(raw, key)
