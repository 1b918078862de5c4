"""Proxies placed in a source: checked, keyed, and the leaves their spans cover (issue 35).

A proxy (:class:`~langchain_s2b.core.proxies.Proxy`) is written as one child of
the child index beside its source's leaves, under the node key of the reserved
level ``proxy``: ``<generation-key>/proxy/<n>``, ``n`` its place among its
source's proxies. Its metadata is a leaf's (the source's own fields,
``source_id``, ``source_key``, ``level``, ``split_id``, ``start``, ``end``:
the span it stands for, in the source's offsets) with ``proxy_kind`` and
``covers``: ``[leaf level, first, last]``, the split ids of the first and last
leaf whose span meets ``[start, end)`` (wholly or partly inside it; the leaves
tile the text, so every span meets at least one). A hit on it counts as a hit
on each of those leaves, at its score (:func:`expand`).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.core.hits import COVERS, PROXY_KIND, Candidate, Hit, Scored
from langchain_s2b.core.keys import PROXY_LEVEL, is_proxy_key, node_key
from langchain_s2b.core.proxies import KINDS, NodeProxies, Proxy
from langchain_s2b.core.tree import Tree


def check_proxies(name: str, text: str, proxies: object) -> list[Proxy]:
    """A document's given proxies, checked: a one-line ``ValueError`` names the first bad one."""
    if isinstance(proxies, str | Proxy) or not isinstance(proxies, Sequence):
        msg = f"proxies for document {name} must be a list of Proxy; got {type(proxies).__name__}."
        raise ValueError(msg)
    out: list[Proxy] = []
    for i, proxy in enumerate(proxies):
        problem = _problem(proxy, len(text))
        if problem:
            msg = f"Proxy #{i} of document {name} {problem}."
            raise ValueError(msg)
        out.append(proxy)
    return out


def _problem(proxy: object, size: int) -> str:
    if not isinstance(proxy, Proxy):
        return f"is a {type(proxy).__name__}; it must be a Proxy(text, start, end, kind)"
    if not isinstance(proxy.text, str) or not proxy.text.strip():
        return f"has text {proxy.text!r}; it must be a non-empty string"
    ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (proxy.start, proxy.end))
    if not ok or not 0 <= proxy.start < proxy.end <= size:
        return (
            f"has the span [{proxy.start!r}, {proxy.end!r}); it must satisfy "
            f"0 <= start < end <= {size} (the length of the document's text)"
        )
    if proxy.kind not in KINDS:
        return f"has kind {proxy.kind!r}; allowed: {', '.join(KINDS)}"
    return ""


def node_proxies(make: NodeProxies, document: Document, tree: Tree, name: str) -> list[Proxy]:
    """The user's proxies by node: ``make(document, node)`` for every node, coarsest level first.

    Each text it returns stands for that node's span (kind ``"user"``).
    """
    out: list[Proxy] = []
    for level in reversed(tree.levels):
        for node in tree.nodes[level]:
            texts = make(document, node)
            if not isinstance(texts, list | tuple) or not all(isinstance(t, str) for t in texts):
                msg = (
                    f"node_proxies returned {type(texts).__name__} for node {node.key!r} of "
                    f"document {name}; it must return a list of str (the proxies' texts)."
                )
                raise TypeError(msg)
            out.extend(Proxy(t, node.start, node.end) for t in texts if t.strip())
    return out


def covers(tree: Tree, start: int, end: int) -> tuple[int, int]:
    """The first and last split ids of the leaves whose spans meet ``[start, end)``."""
    leaves = tree.leaves
    ends = [leaf.end for leaf in leaves]
    first = bisect.bisect_right(ends, start)
    starts = [leaf.start for leaf in leaves]
    last = bisect.bisect_left(starts, end) - 1
    return leaves[first].split_id, leaves[last].split_id


def proxy_documents(
    base: Mapping[str, Any], source_key: str, tree: Tree, proxies: Sequence[Proxy]
) -> list[Document]:
    """The child documents of a source's proxies (``base``: its fields every node carries)."""
    leaf_level = tree.levels[0]
    out = []
    for n, proxy in enumerate(proxies):
        first, last = covers(tree, proxy.start, proxy.end)
        meta = {
            **base,
            "source_key": source_key,
            "level": PROXY_LEVEL,
            "split_id": n,
            "start": proxy.start,
            "end": proxy.end,
            PROXY_KIND: proxy.kind,
            COVERS: [leaf_level, first, last],
        }
        key = node_key(source_key, PROXY_LEVEL, n)
        out.append(Document(page_content=proxy.text, metadata=meta, id=key))
    return out


def proxies_digest(proxies: Sequence[Proxy]) -> str:
    """What a source's proxies add to its digest (``""``: none, the digest of before)."""
    if not proxies:
        return ""
    text = json.dumps([[p.text, p.start, p.end, p.kind] for p in proxies])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def expand(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Each proxy hit as a hit on every leaf it covers, at its score (leaves pass unchanged).

    A leaf met several times keeps its best score; of equal scores its own hit
    (a leaf's own vector is never shadowed by a proxy), then the first proxy
    met. The leaves come unread (:class:`~langchain_s2b.core.hits.Scored`),
    carrying which proxy matched.
    """
    best: dict[str, Candidate] = {}
    for c in candidates:
        if isinstance(c, Hit) and c.covers is not None:
            level, first, last = c.covers
            proxy = (c.key, c.proxy[1] if c.proxy else "", c.text)
            found: list[Candidate] = [
                Scored.of(node_key(c.source_key, level, i), c.score, proxy)
                for i in range(first, last + 1)
            ]
        else:
            found = [c]
        for leaf in found:
            held = best.get(leaf.key)
            if (
                held is None
                or leaf.score > held.score
                or (leaf.score == held.score and held.proxy is not None and leaf.proxy is None)
            ):
                best[leaf.key] = leaf
    return list(best.values())


def expand_lexical(
    lexical: Sequence[tuple[str, float]], proxies: Mapping[str, Candidate]
) -> list[tuple[str, float]]:
    """A lexical top list with each proxy's entry as one per leaf it covers, at its score.

    ``lexical`` is best first, so a leaf keeps the first (best) score it meets;
    a proxy not in ``proxies`` (its covers unread: filtered out, or gone) is left out.
    """
    out: dict[str, float] = {}
    for key, score in lexical:
        if not is_proxy_key(key):
            out.setdefault(key, score)
            continue
        hit = proxies.get(key)
        if isinstance(hit, Hit) and hit.covers is not None:
            level, first, last = hit.covers
            for i in range(first, last + 1):
                out.setdefault(node_key(hit.source_key, level, i), score)
    return list(out.items())
