"""A docstore as a file: one line per node, its key as JSON, a tab, the document as JSON.

Used by save/load for a docstore that lives in memory; reading checks every
line and decodes every document (plain JSON, never pickle).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore, InMemoryByteStore, InMemoryStore

from langchain_s2b.stores import DocumentCodecStore, decode_document, encode_document

BATCH = 1000
"""Keys per ``mget``/``mset`` while copying."""


def docstore_kind(store: BaseStore[str, Document]) -> str:
    """``memory`` / ``memory-bytes`` (copied into a save) or ``external`` (not copied)."""
    if type(store) is InMemoryStore:
        return "memory"
    if isinstance(store, DocumentCodecStore) and type(store.byte_store) is InMemoryByteStore:
        return "memory-bytes"
    return "external"


def write_nodes(store: BaseStore[str, Document], file: Path) -> int:
    """Copy every key and document; a codec store's bytes are copied as they are."""
    count = 0
    raw_store = store.byte_store if isinstance(store, DocumentCodecStore) else None
    with file.open("wb") as out:
        for batch in batches(store.yield_keys()):
            values: list[Any] = (raw_store or store).mget(batch)
            for key, value in zip(batch, values, strict=True):
                if value is None:
                    continue
                if not isinstance(value, bytes) or not value.isascii() or b"\n" in value:
                    value = encode_document(decode_document(value, key) if raw_store else value)
                out.write(json.dumps(key).encode("ascii") + b"\t" + value + b"\n")
                count += 1
    return count


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
    file: Path,
    info: dict[str, Any],
    docstore: BaseStore[str, Document] | None,
    byte_store: BaseStore[str, bytes] | None,
) -> dict[str, Any]:
    """The store to load into (given, or a new in-memory one), filled from ``file``.

    Returns the retriever field to set: ``{"docstore": ...}`` or ``{"byte_store": ...}``.
    """
    if docstore is not None and byte_store is not None:
        msg = "Pass docstore= or byte_store= to load(), not both."
        raise ValueError(msg)
    if docstore is None and byte_store is None:
        if not info["saved"]:
            msg = (
                f"This save did not copy its docstore (a {info.get('class')!r}, which keeps "
                "its own data); pass it again: load(path, embedding, byte_store=...) or "
                "docstore=...."
            )
            raise ValueError(msg)
        if info["kind"] == "memory-bytes":
            byte_store = InMemoryByteStore()
        else:
            docstore = InMemoryStore()
    sink: BaseStore[str, Any] = byte_store if byte_store is not None else docstore  # type: ignore[assignment]
    if info["saved"]:
        pairs: list[tuple[str, Any]] = []
        for key, raw, doc in read_nodes(file):
            pairs.append((key, raw if byte_store is not None else doc))
            if len(pairs) == BATCH:
                sink.mset(pairs)
                pairs = []
        sink.mset(pairs)
    return {"docstore": docstore} if docstore is not None else {"byte_store": byte_store}


def read_nodes(file: Path) -> Iterator[tuple[str, bytes, Document]]:
    """``(key, raw JSON, document)`` per line; every document is decoded and checked."""
    with file.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            head, tab, raw = line.rstrip(b"\n").partition(b"\t")
            try:
                key = json.loads(head)
            except (UnicodeDecodeError, json.JSONDecodeError):
                key = None
            if not tab or not isinstance(key, str):
                msg = f"{file}, line {number}: expected a JSON string key, a tab and a document."
                raise ValueError(msg)
            yield key, raw, decode_document(raw, key)
