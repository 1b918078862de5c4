"""Check that the child index, the docstore and the manifests agree; repair them.

The manifests are the record of truth: a source exists when its manifest
does, and owns exactly the keys its manifest lists. ``check`` scans the
docstore's keys once and lists the child index (when the index can be listed)
and reports:

- *bad manifests*: a ``<source>/manifest`` value that can not be read;
- *missing nodes* and *missing children*: keys a manifest lists that the
  docstore or the child index lacks (an interrupted write, a lost file);
- *orphan nodes* and *orphan children*: node keys no manifest claims (an
  interrupted delete or upsert, a source written by hand).

Keys that are not node keys (``<source>/<level>/<n>``) are foreign data and
are never touched. With ``repair``, orphans are deleted, bad manifests are
deleted (their nodes then are orphans), and a source with missing pieces is
re-indexed from its stored ``doc`` node, or removed when that node is gone
too (listed in ``removed``: add those sources again).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b import lifecycle, ops
from langchain_s2b.index import FaissIndex
from langchain_s2b.ingest import manifest_keys
from langchain_s2b.keys import MANIFEST, check_level_name, node_key
from langchain_s2b.ops import Fetch, Remove, RemoveLeaves
from langchain_s2b.search import Searcher
from langchain_s2b.splitting import DOC_LEVEL

NODE_FIELDS = frozenset(
    {
        "source_id",
        "source_key",
        "level",
        "split_id",
        "start",
        "end",
        "split_idx_start",
        "parent_id",
        "children",
    }
)
"""Metadata that ingestion adds to a node; the rest is the user's."""
_BATCH = 1000


@dataclass(frozen=True)
class ScanKeys:
    """Every key of the docstore."""


@dataclass(frozen=True)
class ListChildren:
    """The child index's keys: ``(keys, complete)``; ``(None, False)`` if unknowable."""

    candidates: list[str]


@dataclass
class VerifyReport:
    """What :func:`check` found, and what it repaired."""

    sources: int = 0
    """Readable manifests."""
    nodes: int = 0
    """Node keys in the docstore."""
    children: int | None = None
    """Keys in the child index (``None`` when it can not be listed)."""
    bad_manifests: list[str] = field(default_factory=list)
    missing_nodes: dict[str, list[str]] = field(default_factory=dict)
    """Source id -> docstore keys its manifest lists but the docstore lacks."""
    missing_children: dict[str, list[str]] = field(default_factory=dict)
    """Source id -> leaf keys its manifest lists but the child index lacks."""
    orphan_nodes: list[str] = field(default_factory=list)
    orphan_children: list[str] = field(default_factory=list)
    foreign_keys: int = 0
    """Docstore keys that are not ours (never touched)."""
    repaired: bool = False
    rebuilt: list[str] = field(default_factory=list)
    """Sources re-indexed from their stored text."""
    removed: list[str] = field(default_factory=list)
    """Sources removed because their text was lost too: add them again."""

    @property
    def ok(self) -> bool:
        """True when both stores and the manifests agree."""
        return not (
            self.bad_manifests
            or self.missing_nodes
            or self.missing_children
            or self.orphan_nodes
            or self.orphan_children
        )


def check(config: lifecycle.Config, *, repair: bool) -> Generator[Any, Any, VerifyReport]:
    """Compare the stores with the manifests; with ``repair``, fix what differs."""
    keys: list[str] = yield ScanKeys()
    report = VerifyReport()
    manifest_names = [k for k in keys if _is_manifest(k)]
    node_names = {k for k in keys if _is_node(k)}
    report.nodes = len(node_names)
    report.foreign_keys = len(keys) - len(manifest_names) - len(node_names)
    manifests: dict[str, Document] = {}
    for start in range(0, len(manifest_names), _BATCH):
        batch = manifest_names[start : start + _BATCH]
        found = yield Fetch(batch)
        for key, doc in zip(batch, found, strict=True):
            if doc is not None and _readable(key, doc):
                manifests[key] = doc
            elif doc is not None:
                report.bad_manifests.append(key)
    report.sources = len(manifests)
    claimed: set[str] = set()
    leaves: dict[str, list[str]] = {}
    for manifest in manifests.values():
        sid = manifest.metadata["source_id"]
        owned = manifest_keys(manifest)[:-1]
        claimed.update(owned)
        leaf_level = manifest.metadata["levels"][0]
        leaves[sid] = [k for k in owned if k.rsplit("/", 2)[1] == leaf_level]
        missing = [k for k in owned if k not in node_names]
        if missing:
            report.missing_nodes[sid] = missing
    report.orphan_nodes = sorted(node_names - claimed)
    all_leaves = [k for keys_ in leaves.values() for k in keys_]
    children, complete = yield ListChildren(all_leaves)
    if children is not None:
        report.children = len(children) if complete else None
        for sid, keys_ in leaves.items():
            missing = [k for k in keys_ if k not in children]
            if missing:
                report.missing_children[sid] = missing
        if complete:
            report.orphan_children = sorted(children - set(all_leaves))
    if repair and not report.ok:
        yield from _repair(config, report, manifests)
    return report


def _repair(
    config: lifecycle.Config, report: VerifyReport, manifests: dict[str, Document]
) -> Generator[Any, Any, None]:
    leaf_level = config.levels[0].name
    if report.bad_manifests:
        yield Remove(report.bad_manifests)
    if report.orphan_nodes:
        yield Remove(report.orphan_nodes)
        yield RemoveLeaves([k for k in report.orphan_nodes if k.rsplit("/", 2)[1] == leaf_level])
    if report.orphan_children:
        yield RemoveLeaves(report.orphan_children)
    by_id = {m.metadata["source_id"]: m for m in manifests.values()}
    for sid in sorted({*report.missing_nodes, *report.missing_children}):
        manifest = by_id[sid]
        doc_key = node_key(manifest.metadata["source_key"], DOC_LEVEL, 0)
        (doc,) = yield Fetch([doc_key])
        yield from lifecycle.remove_source(manifest)
        if doc is None:
            report.removed.append(sid)
            continue
        meta = {k: v for k, v in doc.metadata.items() if k not in NODE_FIELDS}
        source = Document(page_content=doc.page_content, metadata=meta)
        yield from lifecycle.add(config, [source], [sid])
        report.rebuilt.append(sid)
    report.repaired = True


def _is_manifest(key: str) -> bool:
    source, _, last = key.partition("/")
    return last == MANIFEST and bool(source)


def _is_node(key: str) -> bool:
    parts = key.split("/")
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return False
    try:
        check_level_name(parts[1])
    except ValueError:
        return parts[1] == DOC_LEVEL
    return True


def _readable(key: str, manifest: Document) -> bool:
    """A manifest whose fields ``manifest_keys`` and repair rely on are sound."""
    meta = manifest.metadata
    counts, levels = meta.get("counts"), meta.get("levels")
    return (
        isinstance(meta.get("source_id"), str)
        and meta.get("source_key") == key.partition("/")[0]
        and isinstance(levels, list)
        and bool(levels)
        and isinstance(counts, dict)
        and set(counts) == set(levels)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values())
    )


# Running a check ----------------------------------------------------------------------


def list_children(vectorstore: Any, candidates: list[str]) -> tuple[set[str] | None, bool]:
    """The child index's keys and whether that is all of them.

    ``FaissIndex``, LangChain's ``FAISS`` and ``InMemoryVectorStore`` can be
    listed; any other store is asked which ``candidates`` it holds
    (``get_by_ids``), and if it can not say, ``(None, False)``.
    """
    if isinstance(vectorstore, FaissIndex):
        return set(vectorstore.keys()), True
    mapping = getattr(vectorstore, "index_to_docstore_id", None)
    if isinstance(mapping, dict):
        return set(mapping.values()), True
    store = getattr(vectorstore, "store", None)
    if isinstance(store, dict):
        return set(store), True
    try:
        found = vectorstore.get_by_ids(candidates)
    except NotImplementedError:
        return None, False
    return {str(doc.id) for doc in found}, False


async def alist_children(vectorstore: Any, candidates: list[str]) -> tuple[set[str] | None, bool]:
    """Async :func:`list_children` (an async-only store is asked through ``aget_by_ids``)."""
    known = isinstance(vectorstore, FaissIndex) or hasattr(vectorstore, "index_to_docstore_id")
    if known or isinstance(getattr(vectorstore, "store", None), dict):
        return list_children(vectorstore, candidates)
    try:
        found = await vectorstore.aget_by_ids(candidates)
    except NotImplementedError:
        return None, False
    return {str(doc.id) for doc in found}, False


def run(request: Any, searcher: Searcher, store: BaseStore[str, Document]) -> Any:
    """Carry out one request of :func:`check` synchronously."""
    if isinstance(request, ScanKeys):
        return list(store.yield_keys())
    if isinstance(request, ListChildren):
        return list_children(searcher.vectorstore, request.candidates)
    return ops.run(request, searcher, store)


async def arun(request: Any, searcher: Searcher, store: BaseStore[str, Document]) -> Any:
    """Carry out one request of :func:`check` asynchronously."""
    if isinstance(request, ScanKeys):
        return [key async for key in store.ayield_keys()]
    if isinstance(request, ListChildren):
        return await alist_children(searcher.vectorstore, request.candidates)
    return await ops.arun(request, searcher, store)
