"""Add and delete sources across both stores, as operations (generators of requests).

Write order makes a source visible only when it is whole: nodes first, then
the leaf vectors, then the manifest (the commit record). Deletion runs in the
reverse order. An unchanged source (same manifest digest) is skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.ingest import (
    IndexingResult,
    Source,
    identify,
    is_empty,
    leaf_keys,
    manifest_keys,
    prepare,
)
from langchain_s2b.core.keys import encode_source_key, manifest_key
from langchain_s2b.core.requests import (
    AddLeaves,
    Fetch,
    Op,
    Put,
    Remove,
    RemoveLeaves,
    ask,
)
from langchain_s2b.core.tree import Level


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
) -> Op[IndexingResult]:
    """Upsert sources: skip unchanged, replace changed, add new."""
    sources = identify(documents, ids, config.source_fields, config.fingerprint())
    result = IndexingResult()
    current = [s for s in sources if not is_empty(s)]
    result.empty = [s.source_id for s in sources if is_empty(s)]
    old = yield from ask(Fetch([manifest_key(s.source_key) for s in current]))
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
        yield from ask(Put(prepared.nodes))
        yield from ask(AddLeaves(prepared.leaves))
        yield from ask(Put([(str(prepared.manifest.id), prepared.manifest)]))
        result.num_children += len(prepared.leaves)
    return result


def delete(source_ids: Sequence[str]) -> Op[list[str]]:
    """Delete sources by id; unknown ids are reported by their absence."""
    if isinstance(source_ids, str):
        msg = f"delete() takes a list of source ids; got the string {source_ids!r}."
        raise TypeError(msg)
    keys = [manifest_key(encode_source_key(sid)) for sid in source_ids]
    manifests = yield from ask(Fetch(keys))
    deleted = []
    for sid, manifest in zip(source_ids, manifests, strict=True):
        if manifest is not None:
            yield from _remove(manifest_keys(manifest), manifest)
            deleted.append(sid)
    return deleted


def remove_source(manifest: Document) -> Op[None]:
    """Remove every key a source's manifest lists, the manifest first."""
    yield from _remove(manifest_keys(manifest), manifest)


def _remove(keys: list[str], manifest: Document) -> Op[None]:
    """Remove a source: manifest first (it stops being visible), then the rest."""
    yield from ask(Remove([keys[-1]]))
    yield from ask(RemoveLeaves(leaf_keys(manifest)))
    yield from ask(Remove(keys[:-1]))


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
