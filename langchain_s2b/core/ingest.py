"""Ingestion: source documents -> node documents, leaf documents and manifests.

A source's identity is, in this order: the ``ids`` passed to ``add_documents``,
the configured metadata field(s), ``Document.id``, or else a hash of its
content (so re-adding the same text is a no-op, but an edit is a new source).

Each written version of a source is a generation (see
:mod:`~langchain_s2b.core.keys`): its nodes live under the generation's key,
and the manifest, the commit record, names the generation. A source's digest
covers its text, its metadata, the split configuration and the spans the
splitters actually produced, so any change of splitting is a change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core.junk import is_junk
from langchain_s2b.core.keys import (
    composite_source_id,
    encode_source_key,
    generation_key,
    level_prefix,
    manifest_key,
)
from langchain_s2b.core.tree import NODE_FIELDS, Level, Tree, build_tree

MANIFEST_VERSION = 1


@dataclass
class IndexingResult:
    """What ``add_documents`` did, per source id."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    """Sources with no text (empty or whitespace only): nothing was indexed."""
    num_children: int = 0
    """Leaves embedded by this call."""
    deleted_keys: int = 0
    """Old nodes removed because their source changed."""


@dataclass(frozen=True)
class Source:
    """One source document, identified and hashed."""

    source_id: str
    source_key: str
    doc: Document
    digest: str


def source_id_of(doc: Document, given: str | None, fields: Sequence[str]) -> str:
    """The source id of ``doc``: ``given``, metadata fields, ``doc.id`` or a hash."""
    if given is not None:
        return given
    if fields:
        missing = [f for f in fields if doc.metadata.get(f) in (None, "")]
        if missing:
            msg = (
                f"Document {doc.page_content[:40]!r} lacks the source id metadata "
                f"{missing} (source_id_key={list(fields)}); add them or pass ids=."
            )
            raise ValueError(msg)
        return composite_source_id(doc.metadata, fields)
    if doc.id:
        return doc.id
    return (
        "sha256-"
        + hashlib.sha256(doc.page_content.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    )


def identify(
    documents: Sequence[Document], ids: Sequence[str] | None, fields: Sequence[str], config: str
) -> list[Source]:
    """Validate inputs and give each document its source id, key and digest."""
    if ids is not None and len(ids) != len(documents):
        msg = f"Got {len(documents)} documents but {len(ids)} ids; pass one id per document."
        raise ValueError(msg)
    sources: list[Source] = []
    seen: set[str] = set()
    for i, doc in enumerate(documents):
        if not isinstance(doc, Document) or not isinstance(doc.page_content, str):
            got = type(doc.page_content if isinstance(doc, Document) else doc).__name__
            msg = f"Document #{i} must be a Document with str page_content; got {got}."
            raise TypeError(msg)
        given = None if ids is None else ids[i]
        if given is not None and (not isinstance(given, str) or not given):
            msg = f"ids[{i}] must be a non-empty string; got {given!r}."
            raise ValueError(msg)
        _check_json_metadata(doc, i)
        sid = source_id_of(doc, given, fields)
        _check_own_fields(doc, i, sid)
        if sid in seen:
            msg = f"Source id {sid!r} appears twice in one call; each source must be unique."
            raise ValueError(msg)
        seen.add(sid)
        sources.append(Source(sid, encode_source_key(sid), doc, digest(doc, config)))
    return sources


def _check_own_fields(doc: Document, position: int, source_id: str) -> None:
    """Source metadata may not use a name ingestion writes on every node: it would be lost.

    ``source_id`` is allowed when it is the source's id (``source_id_key="source_id"``).
    """
    clash = sorted(
        name
        for name in NODE_FIELDS.intersection(doc.metadata)
        if not (name == "source_id" and str(doc.metadata[name]) == source_id)
    )
    if clash:
        name = f"id={doc.id!r}" if doc.id else f"#{position} ({doc.page_content[:30]!r})"
        msg = (
            f"Document {name} has metadata {clash} that every node sets itself "
            f"({', '.join(sorted(NODE_FIELDS))}); rename them (e.g. 'doc_{clash[0]}')."
        )
        raise ValueError(msg)


def _check_json_metadata(doc: Document, position: int) -> None:
    """Metadata must be plain JSON: it is stored on every node and saved without pickle.

    Its keys are strings at every depth (``Document.metadata`` is a
    ``dict[str, Any]``; JSON would write ``2020`` as ``"2020"``).
    """
    name = f"id={doc.id!r}" if doc.id else f"#{position} ({doc.page_content[:30]!r})"
    keys = _non_string_keys(doc.metadata)
    if keys:
        key = keys[0]
        msg = (
            f"Document {name} has a metadata key that is not a string: {key!r} "
            f"({type(key).__name__}); metadata keys must be strings (e.g. {str(key)!r})."
        )
        raise ValueError(msg)
    try:
        json.dumps(doc.metadata, allow_nan=False)
    except (TypeError, ValueError) as err:
        msg = (
            f"Document {name} has metadata that is not JSON-serialisable ({err}); use str, int, "
            "float, bool, None, and lists and dicts of them (e.g. a date as an ISO string)."
        )
        raise ValueError(msg) from None


def _non_string_keys(value: object) -> list[object]:
    """The dict keys in ``value`` (at any depth) that are not strings."""
    if isinstance(value, dict):
        found = [key for key in value if not isinstance(key, str)]
        return found or [k for item in value.values() for k in _non_string_keys(item)]
    if isinstance(value, list | tuple):
        return [key for item in value for key in _non_string_keys(item)]
    return []


def digest(doc: Document, config: str) -> str:
    """Content hash of a source: its text, its metadata and the split config."""
    meta = json.dumps(doc.metadata, sort_keys=True, default=str)
    h = hashlib.sha256()
    for part in (config, meta, doc.page_content):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def tree_digest(source: Source, tree: Tree) -> str:
    """The source's digest combined with the spans its tree holds (re-split and compare)."""
    h = hashlib.sha256(source.digest.encode("ascii"))
    for level in tree.levels:
        spans = [(node.start, node.end) for node in tree.nodes[level]]
        h.update(json.dumps([level, spans]).encode("ascii"))
    return h.hexdigest()


def manifest_document(
    source: Source, tree: Tree, generation: int = 0, junk: list[int] | None = None
) -> Document:
    """The manifest: enough to enumerate every key the source produced.

    ``junk``: the split ids of the leaves not embedded, when the caller knows them.
    """
    counts = {level: len(nodes) for level, nodes in tree.nodes.items()}
    if junk is None:
        text = source.doc.page_content
        junk = [n.split_id for n in tree.leaves if is_junk(text[n.start : n.end])]
    meta: dict[str, object] = {
        "version": MANIFEST_VERSION,
        "source_id": source.source_id,
        "source_key": source.source_key,
        "generation": generation,
        "digest": tree_digest(source, tree),
        "levels": tree.levels,
        "counts": counts,
    }
    if junk:
        meta["unembedded"] = junk
    return Document(page_content="", metadata=meta, id=manifest_key(source.source_key))


def generation_of(manifest: Document) -> int:
    """The generation a manifest names (``0`` for manifests written before generations)."""
    generation = manifest.metadata.get("generation", 0)
    return int(generation)


def nodes_key(manifest: Document) -> str:
    """The key under which a manifest's generation keeps its nodes."""
    return generation_key(manifest.metadata["source_key"], generation_of(manifest))


def node_keys(manifest: Document) -> list[str]:
    """Every node key of a manifest's generation (the manifest's own key not included)."""
    meta = manifest.metadata
    base = nodes_key(manifest)
    keys: list[str] = []
    for level, count in meta["counts"].items():
        prefix = level_prefix(base, level)
        keys.extend(f"{prefix}{i}" for i in range(int(count)))
    return keys


def manifest_keys(manifest: Document) -> list[str]:
    """Every key a manifest's source wrote, the manifest's own last."""
    return [*node_keys(manifest), manifest_key(manifest.metadata["source_key"])]


def leaf_keys(manifest: Document) -> list[str]:
    """The keys of a manifest's embedded leaves (junk leaves are stored, not embedded)."""
    meta = manifest.metadata
    prefix = level_prefix(nodes_key(manifest), meta["levels"][0])
    skipped = set(meta.get("unembedded", ()))
    count = int(meta["counts"][meta["levels"][0]])
    return [f"{prefix}{i}" for i in range(count) if i not in skipped]


@dataclass
class Prepared:
    """Everything one source writes."""

    source: Source
    leaves: list[Document]
    nodes: list[tuple[str, Document]]
    manifest: Document


def prepare(source: Source, levels: Sequence[Level], generation: int = 0) -> Prepared:
    """Split one source into leaf documents (to embed) and node documents (to store).

    The nodes are keyed under generation ``generation`` of the source. The
    leaves of one parent share its ``ancestors`` list (metadata is read only).
    """
    text = source.doc.page_content
    base = generation_key(source.source_key, generation)
    tree = build_tree(text, base, levels)
    common = {**source.doc.metadata, "source_id": source.source_id, "source_key": base}
    n_leaves = len(tree.leaves)
    leaf_level = tree.levels[0]
    nodes: list[tuple[str, Document]] = []
    leaves: list[Document] = []
    junk: list[int] = []
    for level in tree.levels:
        is_leaf = level == leaf_level
        ancestries: dict[int, list[list[str | int]]] = {}
        for node in tree.nodes[level]:
            key = node.key
            start = node.start
            meta = {
                **common,
                "level": node.level,
                "split_id": node.split_id,
                "start": start,
                "end": node.end,
                "split_idx_start": start,
                "parent_id": node.parent_key,
            }
            if node.children is not None:
                meta["children"] = list(node.children)
            if is_leaf:  # one document serves the docstore and the child index
                shared = ancestries.get(id(node.ancestors))
                if shared is None:
                    shared = ancestries[id(node.ancestors)] = [list(a) for a in node.ancestors]
                meta["ancestors"] = shared
                meta["source_splits"] = n_leaves
            doc = Document(page_content=text[start : node.end], metadata=meta, id=key)
            nodes.append((key, doc))
            if is_leaf:
                if is_junk(doc.page_content):
                    junk.append(node.split_id)
                else:
                    leaves.append(doc)
    manifest = manifest_document(source, tree, generation, junk)
    return Prepared(source, leaves, nodes, manifest)


def is_empty(source: Source) -> bool:
    """A source with no text to index."""
    return not source.doc.page_content.strip()
