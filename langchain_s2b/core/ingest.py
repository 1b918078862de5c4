"""Ingestion: source documents -> node documents, leaf documents and manifests.

A source's identity is, in this order: the ``ids`` passed to ``add_documents``,
the configured metadata field(s), ``Document.id``, or else a hash of its
content (so re-adding the same text is a no-op, but an edit is a new source).

Each written version of a source is a generation (see
:mod:`~langchain_s2b.core.keys`): its nodes live under the generation's key,
and the manifest, the commit record, names the generation. A source's digest
covers its text, its metadata, the split configuration and the spans the
splitters actually produced, so any change of splitting is a change.

A leaf's document also carries its contextual header (``heading``) and its
model-written context (``leaf_context``) when the retriever writes them
(:class:`LeafNotes`; :mod:`~langchain_s2b.core.headers`): what is embedded
is :func:`~langchain_s2b.core.headers.embedded_text` of a leaf, never its
``page_content`` changed.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import overload

from langchain_core.documents import Document

from langchain_s2b.core.headers import (
    HEADING,
    LEAF_CONTEXT,
    HeaderFunction,
    SectionHeaders,
    embedded_text,
)
from langchain_s2b.core.junk import is_junk
from langchain_s2b.core.keys import (
    PROXY_LEVEL,
    composite_source_id,
    encode_source_key,
    generation_key,
    level_prefix,
    manifest_key,
)
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.proxy_spans import proxies_digest, proxy_documents
from langchain_s2b.core.tree import DOC_LEVEL, NODE_FIELDS, Level, Node, Tree, build_tree

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
    num_proxies: int = 0
    """Proxies embedded by this call (beside its leaves)."""
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
        for start in range(0, len(part), _HASH_CHARS):  # no copy of a large text in UTF-8
            h.update(part[start : start + _HASH_CHARS].encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


_HASH_CHARS = 1 << 20
"""Characters encoded at a time to hash a text (UTF-8 encodes each code point alone)."""


def tree_digest(source: Source, tree: Tree, proxies: str = "") -> str:
    """The source's digest combined with the spans its tree holds (re-split and compare).

    ``proxies``: :func:`~langchain_s2b.core.proxy_spans.proxies_digest` of the user's proxies.
    """
    h = hashlib.sha256(source.digest.encode("ascii"))
    for level in tree.levels:
        spans = [(node.start, node.end) for node in tree.nodes[level]]
        h.update(json.dumps([level, spans]).encode("ascii"))
    if proxies:
        h.update(proxies.encode("ascii"))
    return h.hexdigest()


def manifest_document(
    source: Source,
    tree: Tree,
    generation: int = 0,
    junk: list[int] | None = None,
    proxies: Sequence[Proxy] = (),
    digested: Sequence[Proxy] = (),
) -> Document:
    """The manifest: enough to enumerate every key the source produced.

    ``junk``: the split ids of the leaves not embedded, when the caller knows them.
    ``proxies``: how many it has is recorded; ``digested``: those its digest covers,
    the first of them (the user's; model-written ones are covered by the configuration's
    fingerprint), counted when not all.
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
        "digest": tree_digest(source, tree, proxies_digest(digested)),
        "levels": tree.levels,
        "counts": counts,
    }
    if junk:
        meta["unembedded"] = junk
    if proxies:
        meta["proxies"] = len(proxies)
    if len(digested) != len(proxies):
        meta["digested_proxies"] = len(digested)
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


def digested_proxies(manifest: Document) -> int:
    """How many of a manifest's proxies (the first) its digest covers."""
    meta = manifest.metadata
    return int(meta.get("digested_proxies", meta.get("proxies", 0)))


def proxy_keys(manifest: Document) -> list[str]:
    """The keys of a manifest's proxies (children of the child index beside its leaves)."""
    prefix = level_prefix(nodes_key(manifest), PROXY_LEVEL)
    return [f"{prefix}{i}" for i in range(int(manifest.metadata.get("proxies", 0)))]


def child_keys(manifest: Document) -> list[str]:
    """Every key a manifest's source holds in the child index: its leaves, then its proxies."""
    return [*leaf_keys(manifest), *proxy_keys(manifest)]


@dataclass
class LeafNotes:
    """What a source's leaves carry beside their span: headers and model-written contexts."""

    headings: Sequence[str] | None = None
    """Each leaf's contextual header, by split id (``None``: headers are off)."""
    contexts: Sequence[str] | None = None
    """Each leaf's model-written context, by split id (``None``: no context model)."""

    def __bool__(self) -> bool:
        return self.headings is not None or self.contexts is not None

    def of(self, split_id: int) -> dict[str, str]:
        """The metadata fields of one leaf (none that would be empty)."""
        out: dict[str, str] = {}
        if self.headings is not None and self.headings[split_id]:
            out[HEADING] = self.headings[split_id]
        if self.contexts is not None and self.contexts[split_id]:
            out[LEAF_CONTEXT] = self.contexts[split_id]
        return out


class NodeDocuments(Sequence[Document]):
    """Node documents of one source, made when read: a source's nodes are never all objects.

    A node's document (text slice, metadata) is built from the span tree when
    it is asked for, so that a large source is written in batches and never
    holds a ``Document`` per node (a 50 MB text has ~350,000 of them). The
    leaves of one parent share one ``ancestors`` list (metadata is read only).

    Args:
        source: the source.
        tree: its span tree, keyed under the written generation.
        runs: ``(level, positions in that level)`` in order: the nodes, level by level
            (``range`` for a whole level: nothing is stored per node).
        notes: the leaves' headers and contexts (shared by a source's node documents).
    """

    def __init__(
        self,
        source: Source,
        tree: Tree,
        runs: Sequence[tuple[int, Sequence[int]]],
        notes: LeafNotes | None = None,
    ) -> None:
        self.source = source
        self.tree = tree
        self.notes = notes if notes is not None else LeafNotes()
        self._levels = tree.levels
        self._runs = runs
        self._starts = list(itertools.accumulate((len(p) for _, p in runs), initial=0))
        base = tree.nodes[DOC_LEVEL][0].source_key
        self._common = {**source.doc.metadata, "source_id": source.source_id, "source_key": base}
        self._n_leaves = len(tree.leaves)
        self._shared: tuple[int, list[list[str | int]]] = (-1, [])

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, index: int) -> Document: ...

    @overload
    def __getitem__(self, index: slice) -> list[Document]: ...

    def __getitem__(self, index: int | slice) -> Document | list[Document]:
        if isinstance(index, slice):
            return [self._document(*self._entry(i)) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            msg = f"node {index} of {len(self)}"
            raise IndexError(msg)
        return self._document(*self._entry(index))

    def _entry(self, index: int) -> tuple[int, int]:
        run = bisect.bisect_right(self._starts, index) - 1
        level, positions = self._runs[run]
        return level, positions[index - self._starts[run]]

    def _entries(self) -> Iterator[tuple[Node, int]]:
        nodes, levels = self.tree.nodes, self._levels
        for level, positions in self._runs:
            row = nodes[levels[level]]
            for position in positions:
                yield row[position], level

    def __iter__(self) -> Iterator[Document]:
        document = self._node_document
        for node, level in self._entries():
            yield document(node, level)

    def ids(self) -> list[str]:
        """The nodes' keys (their documents' ids), in order; no document is made."""
        return [node.key for node, _ in self._entries()]

    def texts(self) -> list[str]:
        """The nodes' texts, in order (no document is made)."""
        text = self.source.doc.page_content
        return [text[node.start : node.end] for node, _ in self._entries()]

    def embedded_texts(self) -> list[str]:
        """What is embedded for each node: its header and context with its text (leaves)."""
        text, notes = self.source.doc.page_content, self.notes
        return [
            embedded_text(
                text[node.start : node.end], notes.of(node.split_id) if level == 0 else {}
            )
            for node, level in self._entries()
        ]

    def _document(self, level: int, position: int) -> Document:
        return self._node_document(self.tree.nodes[self._levels[level]][position], level)

    def _node_document(self, node: Node, level: int) -> Document:
        start = node.start
        meta = {
            **self._common,
            "level": node.level,
            "split_id": node.split_id,
            "start": start,
            "end": node.end,
            "split_idx_start": start,
            "parent_id": node.parent_key,
        }
        if node.children is not None:
            meta["children"] = list(node.children)
        if level == 0:  # a leaf: its ancestors (shared with its siblings) and the leaf count
            if self._shared[0] != id(node.ancestors):
                self._shared = (id(node.ancestors), [list(a) for a in node.ancestors])
            meta["ancestors"] = self._shared[1]
            meta["source_splits"] = self._n_leaves
            if self.notes:
                meta.update(self.notes.of(node.split_id))
        text = self.source.doc.page_content[start : node.end]
        return Document(page_content=text, metadata=meta, id=node.key)


class NodePairs(Sequence[tuple[str, Document]]):
    """``(key, document)`` of every node of one source, coarsest level first, made when read.

    The ``doc`` node comes first, so a store that keeps each node as a span of
    its source's text has the source before any of its spans, in any batch.
    """

    def __init__(self, documents: NodeDocuments) -> None:
        self.documents = documents

    def __len__(self) -> int:
        return len(self.documents)

    @overload
    def __getitem__(self, index: int) -> tuple[str, Document]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, Document]]: ...

    def __getitem__(self, index: int | slice) -> tuple[str, Document] | list[tuple[str, Document]]:
        if isinstance(index, slice):
            return [(str(doc.id), doc) for doc in self.documents[index]]
        doc = self.documents[index]
        return str(doc.id), doc

    def __iter__(self) -> Iterator[tuple[str, Document]]:
        for doc in self.documents:
            yield str(doc.id), doc

    def ids(self) -> list[str]:
        """The nodes' keys, in order."""
        return self.documents.ids()


@dataclass
class Prepared:
    """Everything one source writes (its documents made when read: see :class:`NodeDocuments`)."""

    source: Source
    leaves: NodeDocuments
    """The leaves to embed, in order (junk leaves are stored, not embedded)."""
    nodes: NodePairs
    """Every node as ``(key, document)``, coarsest level first."""
    manifest: Document
    notes: LeafNotes = field(default_factory=LeafNotes)
    """The leaves' headers and contexts (the contexts are set once written: ``lifecycle``)."""
    proxies: list[Document] = field(default_factory=list)
    """The proxies' child documents, indexed after the leaves (:func:`with_proxies`)."""
    given: tuple[list[Proxy], list[Proxy]] = ([], [])
    """The proxies and those of them the digest covers (kept to prepare it again)."""

    def children(self) -> list[Document]:
        """Everything it adds to the child index: the leaves, then the proxies."""
        return [*self.leaves, *self.proxies]

    def child_ids(self) -> list[str]:
        """The keys of :meth:`children` (no leaf document is made)."""
        return [*self.leaves.ids(), *(str(p.id) for p in self.proxies)]

    def embedded_texts(self) -> list[str]:
        """What is embedded for :meth:`children`: each proxy's text alone (no header)."""
        return [*self.leaves.embedded_texts(), *(p.page_content for p in self.proxies)]

    @property
    def tree(self) -> Tree:
        """The source's span tree."""
        return self.leaves.tree


def prepare(
    source: Source,
    levels: Sequence[Level],
    generation: int = 0,
    headers: bool | HeaderFunction = False,
) -> Prepared:
    """Split one source into its leaves (to embed) and its nodes (to store).

    The nodes are keyed under generation ``generation`` of the source. Their
    documents are made when read (:class:`NodeDocuments`). ``headers``: each
    leaf's contextual header (``True``: title and section path; a callable:
    its own), in its ``heading`` metadata.
    """
    text = source.doc.page_content
    tree = build_tree(text, generation_key(source.source_key, generation), levels)
    notes = LeafNotes(leaf_headings(source, tree, headers))
    junk = [node.split_id for node in tree.leaves if is_junk(text[node.start : node.end])]
    leaves: Sequence[int] = range(len(tree.leaves))
    if junk:  # split ids are positions: the leaves in between
        skipped = set(junk)
        leaves = array.array("q", (i for i in leaves if i not in skipped))
    every = [
        (level, range(len(tree.nodes[tree.levels[level]]))) for level in range(len(tree.levels))
    ]
    manifest = manifest_document(source, tree, generation, junk)
    return Prepared(
        source,
        NodeDocuments(source, tree, [(0, leaves)], notes),
        NodePairs(NodeDocuments(source, tree, every[::-1], notes)),
        manifest,
        notes,
    )


def with_proxies(
    prepared: Prepared, proxies: Sequence[Proxy], digested: Sequence[Proxy]
) -> Prepared:
    """``prepared`` with these proxies: its manifest counts them, its digest covers ``digested``."""
    if not proxies and not digested:
        return prepared
    source, tree = prepared.source, prepared.tree
    generation = generation_of(prepared.manifest)
    junk = list(prepared.manifest.metadata.get("unembedded", ()))
    base = {**source.doc.metadata, "source_id": source.source_id}
    key = generation_key(source.source_key, generation)
    return replace(
        prepared,
        manifest=manifest_document(source, tree, generation, junk, proxies, digested),
        proxies=proxy_documents(base, key, tree, proxies),
        given=(list(proxies), list(digested)),
    )


def leaf_headings(source: Source, tree: Tree, headers: bool | HeaderFunction) -> list[str] | None:
    """Each leaf's contextual header, by split id (``None``: headers are off).

    ``True``: the document's title and the section path where the leaf starts
    (:class:`~langchain_s2b.core.headers.SectionHeaders`). A callable is given
    the source document and the leaf's document and must return a string.
    """
    if headers is False:
        return None
    if headers is True:
        sections = SectionHeaders(source.doc.page_content, source.doc.metadata)
        return [sections.at(node.start, node.end) for node in tree.leaves]
    documents = NodeDocuments(source, tree, [(0, range(len(tree.leaves)))])
    out = []
    for leaf in documents:
        found = headers(source.doc, leaf)
        if not isinstance(found, str):
            msg = (
                f"contextual_headers returned {type(found).__name__} for leaf {leaf.id!r}; "
                "it must return a str (the header, '' for none)."
            )
            raise TypeError(msg)
        out.append(found)
    return out


def leaf_texts(
    source: Source,
    levels: Sequence[Level],
    headers: bool | HeaderFunction = False,
    contexts: Sequence[str] | None = None,
) -> list[str]:
    """What :func:`prepare` embeds for ``source``'s leaves, in order (no document is made).

    ``contexts``: each leaf's model-written context, by split id, when there are any.
    """
    return leaf_texts_and_nodes(source, levels, headers, contexts)[0]


def leaf_texts_and_nodes(
    source: Source,
    levels: Sequence[Level],
    headers: bool | HeaderFunction = False,
    contexts: Sequence[str] | None = None,
) -> tuple[list[str], int]:
    """:func:`leaf_texts`, and how many nodes :func:`prepare` stores for ``source``."""
    text = source.doc.page_content
    tree = build_tree(text, source.source_key, levels)
    notes = LeafNotes(leaf_headings(source, tree, headers), contexts)
    pieces = ((node.split_id, text[node.start : node.end]) for node in tree.leaves)
    texts = [embedded_text(piece, notes.of(i)) for i, piece in pieces if not is_junk(piece)]
    return texts, sum(len(nodes) for nodes in tree.nodes.values())


def is_empty(source: Source) -> bool:
    """A source with no text to index."""
    text = source.doc.page_content
    return not text or text.isspace()  # as ``not text.strip()``, without a copy
