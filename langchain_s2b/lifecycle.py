"""Add and delete sources across both stores, as generators of I/O requests.

Write order makes a source visible only when it is whole: nodes first, then
the leaf vectors, then the manifest (the commit record). Deletion runs in the
reverse order. An unchanged source (same manifest digest) is skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator, Sequence
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
    for source, manifest in zip(current, old):
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
    for sid, manifest in zip(source_ids, manifests):
        if manifest is not None:
            yield from _remove(manifest_keys(manifest), manifest)
            deleted.append(sid)
    return deleted


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
