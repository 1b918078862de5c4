"""Verification: the child index, the docstore and the manifests agree, or are repaired.

The manifests are the record of truth: a source exists when its manifest
does, and owns exactly the keys its manifest lists. ``check`` scans the
docstore's keys once and lists the child index (when the index can be listed)
and reports:

- *bad manifests*: a ``<source>/manifest`` value that can not be read;
- *missing nodes* and *missing children*: keys a manifest lists that the
  docstore or the child index lacks (an interrupted write, a lost file);
- *orphan nodes* and *orphan children*: node keys no manifest claims (an
  interrupted delete or upsert, a source written by hand), including every
  node of a generation that no manifest names;
- with hybrid search, leaves the lexical index lacks or holds beyond the
  manifests (repair builds it again from the child index or the docstore);
- *unindexed children* and *stray vectors*: a child index whose own parts
  disagree (``FaissIndex``: a leaf's record without its vector, a vector
  without a record; what an interrupted write leaves when its undo fails too).
  Repair drops both, and indexes the sources of those leaves again.

With ``digests``, every source is also checked against its manifest's
digest, which covers its text, its metadata, the split configuration and the
spans: its stored ``doc`` node is split again and must give the manifest (so
the digest) and every stored node exactly:

- *bad digests*: the stored text, metadata or manifest no longer give the
  digest (bytes changed on disk, or the split configuration is not the one the
  source was written with): the stored text can not be trusted;
- *bad nodes*: the text is sound but stored nodes differ from its split.

Keys that are not node keys (``<source>/<level>/<n>``) are foreign data and
are never touched. With ``repair``, orphans are deleted, bad manifests are
deleted (their nodes then are orphans), and a source with missing or bad
pieces is re-indexed from its stored ``doc`` node as a new generation (the old
one is removed after it), or removed when that node is gone too or fails its
digest (listed in ``removed``: add those sources again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core import lifecycle
from langchain_s2b.core.headers import LEAF_CONTEXT
from langchain_s2b.core.hits import Hit
from langchain_s2b.core.ingest import (
    child_keys,
    digested_proxies,
    generation_of,
    identify,
    manifest_keys,
    node_keys,
    nodes_key,
    prepare,
    proxy_keys,
    with_proxies,
)
from langchain_s2b.core.keys import (
    is_manifest_key,
    is_node_key,
    is_proxy_key,
    level_of,
    node_key,
    source_key_of,
)
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.requests import (
    CheckChildren,
    Fetch,
    LexicalKeys,
    ListChildren,
    MendChildren,
    Op,
    ReadHits,
    RebuildLexical,
    Remove,
    RemoveLeaves,
    ScanKeys,
    ask,
)
from langchain_s2b.core.tree import DOC_LEVEL, user_metadata

_BATCH = 1000


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
    """Source id -> leaf and proxy keys its manifest lists but the child index lacks."""
    orphan_nodes: list[str] = field(default_factory=list)
    orphan_children: list[str] = field(default_factory=list)
    lexical_missing: list[str] = field(default_factory=list)
    """Leaf keys the manifests list but the lexical index lacks (hybrid search)."""
    lexical_orphans: list[str] = field(default_factory=list)
    """Keys the lexical index holds that no manifest lists."""
    unindexed_children: list[str] = field(default_factory=list)
    """Leaf keys the child index holds a record for but no vector (no search finds them)."""
    stray_vectors: int = 0
    """Vectors the child index holds for no leaf."""
    bad_proxies: dict[str, list[str]] = field(default_factory=dict)
    """Source id -> its proxies whose covers point at no leaf of its generation."""
    bad_digests: list[str] = field(default_factory=list)
    """Source ids whose stored text, metadata or manifest do not give the manifest's digest."""
    bad_nodes: dict[str, list[str]] = field(default_factory=dict)
    """Source id -> stored nodes that differ from the split of its (sound) text."""
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
            or self.lexical_missing
            or self.lexical_orphans
            or self.unindexed_children
            or self.stray_vectors
            or self.bad_digests
            or self.bad_nodes
            or self.bad_proxies
        )


def check(config: lifecycle.Config, *, repair: bool, digests: bool = False) -> Op[VerifyReport]:
    """Compare the stores with the manifests (and, with ``digests``, the text with its digest).

    With ``repair``, fix what differs.
    """
    keys = yield from ask(ScanKeys())
    report = VerifyReport()
    manifest_names = [k for k in keys if is_manifest_key(k)]
    node_names = {k for k in keys if is_node_key(k)}
    report.nodes = len(node_names)
    report.foreign_keys = len(keys) - len(manifest_names) - len(node_names)
    manifests: dict[str, Document] = {}
    for start in range(0, len(manifest_names), _BATCH):
        batch = manifest_names[start : start + _BATCH]
        found = yield from ask(Fetch(batch))
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
        leaves[sid] = child_keys(manifest)  # its proxies too: one with no source is an orphan
        missing = [k for k in owned if k not in node_names]
        if missing:
            report.missing_nodes[sid] = missing
    report.orphan_nodes = sorted(node_names - claimed)
    all_leaves = [k for keys_ in leaves.values() for k in keys_]
    children, complete = yield from ask(ListChildren(all_leaves))
    if children is not None:
        report.children = len(children) if complete else None
        for sid, keys_ in leaves.items():
            missing = [k for k in keys_ if k not in children]
            if missing:
                report.missing_children[sid] = missing
        if complete:
            report.orphan_children = sorted(children - set(all_leaves))
    yield from _check_proxies(list(manifests.values()), report)
    damage = yield from ask(CheckChildren())
    if damage is not None:
        report.unindexed_children, report.stray_vectors = sorted(damage.unindexed), damage.stray
    lexical = yield from ask(LexicalKeys())
    if lexical is not None:  # a proxy may be dense only (a generic store's lexical index)
        listed = set(all_leaves)
        report.lexical_missing = sorted(k for k in listed - lexical if not is_proxy_key(k))
        report.lexical_orphans = sorted(lexical - listed)
    if digests:
        yield from _check_digests(config, list(manifests.values()), report)
    if repair and not report.ok:
        yield from _repair(config, report, manifests)
    return report


def _repair(
    config: lifecycle.Config, report: VerifyReport, manifests: dict[str, Document]
) -> Op[None]:
    leaf_level = config.levels[0].name
    if report.unindexed_children or report.stray_vectors:
        yield from ask(MendChildren())
    if report.bad_manifests:
        yield from ask(Remove(report.bad_manifests))
    if report.orphan_nodes:
        yield from ask(Remove(report.orphan_nodes))
        orphan_leaves = [k for k in report.orphan_nodes if level_of(k) == leaf_level]
        yield from ask(RemoveLeaves(orphan_leaves))
    if report.orphan_children:
        yield from ask(RemoveLeaves(report.orphan_children))
    by_id = {m.metadata["source_id"]: m for m in manifests.values()}
    untrusted = set(report.bad_digests)
    unindexed = set(report.unindexed_children)
    mended = {m.metadata["source_id"] for m in manifests.values() if unindexed & set(child_keys(m))}
    damaged = {*report.missing_nodes, *report.missing_children, *report.bad_nodes, *untrusted}
    damaged |= set(report.bad_proxies)
    damaged |= mended
    for sid in sorted(damaged):
        manifest = by_id[sid]
        (doc,) = yield from ask(Fetch([node_key(nodes_key(manifest), DOC_LEVEL, 0)]))
        if doc is None or sid in untrusted:
            yield from lifecycle.remove_source(manifest)
            report.removed.append(sid)
            continue
        source = Document(page_content=doc.page_content, metadata=user_metadata(doc.metadata))
        kept = yield from _kept_proxies(manifest, report.bad_proxies.get(sid, []))
        yield from lifecycle.add(config, [source], [sid], force=[sid], proxies=[kept])
        report.rebuilt.append(sid)
    if report.lexical_missing or report.lexical_orphans:
        yield from ask(RebuildLexical())
    report.repaired = True


def _check_proxies(manifests: list[Document], report: VerifyReport) -> Op[None]:
    """Every proxy's covers name leaves of its own source's generation (read where readable)."""
    for start in range(0, len(manifests), _BATCH):
        batch = [m for m in manifests[start : start + _BATCH] if proxy_keys(m)]
        keys = [key for m in batch for key in proxy_keys(m)]
        if not keys:
            continue
        read = yield from ask(ReadHits(keys))
        for manifest in batch:
            bad = [k for k in proxy_keys(manifest) if k in read and not _covers(manifest, read[k])]
            if bad:
                report.bad_proxies[manifest.metadata["source_id"]] = bad


def _covers(manifest: Document, hit: Hit) -> bool:
    """Whether a proxy's hit covers leaves its manifest lists (and its span meets them)."""
    meta = manifest.metadata
    level = meta["levels"][0]
    if hit.covers is None or hit.covers[0] != level or hit.source_key != nodes_key(manifest):
        return False
    _, first, last = hit.covers
    return 0 <= first <= last < int(meta["counts"][level]) and hit.start < hit.end


def _check_digests(
    config: lifecycle.Config, manifests: list[Document], report: VerifyReport
) -> Op[None]:
    """Split each source's stored text again: it must give its manifest and its nodes."""
    fingerprint = config.fingerprint()
    batch: list[Document] = []
    size = 0
    for manifest in [*manifests, None]:
        if manifest is not None:
            batch.append(manifest)
            size += len(node_keys(manifest))
            if size < _BATCH:
                continue
        keys = [key for m in batch for key in node_keys(m)]
        fetched = dict(zip(keys, (yield from ask(Fetch(keys))), strict=True)) if keys else {}
        wanted = [key for m in batch for key in proxy_keys(m)]
        proxies = (yield from ask(ReadHits(wanted))) if wanted else {}
        for one in batch:
            _check_digest(config, fingerprint, one, fetched, proxies, report)
        batch, size = [], 0


def _check_digest(
    config: lifecycle.Config,
    fingerprint: str,
    manifest: Document,
    fetched: dict[str, Document | None],
    proxies: dict[str, Hit],
    report: VerifyReport,
) -> None:
    sid = manifest.metadata["source_id"]
    doc = fetched.get(node_key(nodes_key(manifest), DOC_LEVEL, 0))
    if doc is None:
        return  # a missing node: reported (and repaired) as such
    text = Document(page_content=doc.page_content, metadata=user_metadata(doc.metadata))
    try:
        (source,) = identify([text], [sid], config.source_fields, fingerprint)
    except (TypeError, ValueError):
        report.bad_digests.append(sid)
        return
    prepared = prepare(source, config.levels, generation_of(manifest), config.headers)
    stored = [proxies.get(key) for key in proxy_keys(manifest)]
    if all(hit is not None and hit.proxy is not None for hit in stored):
        given = [_proxy(hit) for hit in stored if hit is not None]
        prepared = with_proxies(prepared, given, given[: digested_proxies(manifest)])
    else:  # unreadable here, or missing (reported as such): the rest is compared
        prepared.manifest.metadata.update(
            {k: v for k, v in manifest.metadata.items() if k in _PROXY_FIELDS}
        )
    if prepared.manifest.metadata != manifest.metadata:
        report.bad_digests.append(sid)
        return
    differ = [k for k, node in prepared.nodes if _differs(fetched.get(k), node)]
    if differ:
        report.bad_nodes[sid] = differ


_PROXY_FIELDS = ("digest", "proxies", "digested_proxies")


def _proxy(hit: Hit) -> Proxy:
    """The proxy a proxy's stored row holds."""
    kind = hit.proxy[1] if hit.proxy is not None else "user"
    return Proxy(hit.text, hit.start, hit.end, kind)


def _kept_proxies(manifest: Document, bad: list[str]) -> Op[list[Proxy]]:
    """A source's own (digested) proxies that can be read and are sound, to write it again."""
    keys = proxy_keys(manifest)[: digested_proxies(manifest)]
    read = (yield from ask(ReadHits(keys))) if keys else {}
    return [_proxy(read[k]) for k in keys if k in read and k not in bad]


def _differs(stored: Document | None, node: Document) -> bool:
    """A stored node unlike its split (its model-written context is the model's: not compared)."""
    if stored is None or stored == node:
        return False
    if LEAF_CONTEXT not in stored.metadata:
        return True
    meta = {k: v for k, v in stored.metadata.items() if k != LEAF_CONTEXT}
    return Document(page_content=stored.page_content, metadata=meta, id=stored.id) != node


def _readable(key: str, manifest: Document) -> bool:
    """A manifest whose fields ``manifest_keys`` and repair rely on are sound."""
    meta = manifest.metadata
    counts, levels = meta.get("counts"), meta.get("levels")
    generation = meta.get("generation", 0)
    return (
        isinstance(generation, int)
        and not isinstance(generation, bool)
        and generation >= 0
        and isinstance(meta.get("source_id"), str)
        and meta.get("source_key") == source_key_of(key)
        and isinstance(levels, list)
        and bool(levels)
        and all(isinstance(level, str) for level in levels)
        and isinstance(counts, dict)
        and set(counts) == set(levels)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values())
        and all(_count(meta.get(name, 0)) for name in ("proxies", "digested_proxies"))
    )


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
