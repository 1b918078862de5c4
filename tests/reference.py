"""A slow, obviously correct statement of every retrieval mode's contract (tests only).

It works from three things only: the source texts, each level's exact spans
(computed by the caller, not by the library), and the score the child index
gives each child. :func:`retrieve` returns the ``Document`` list that
``SmallToBigRetriever.invoke`` must return, metadata included.

The contract, written once here:

* **Search.** A search ``fetch`` deep returns the ``fetch`` best children that
  pass the filter. When the ``fetch``-th and the next child score the same,
  the engine chose among equals, so that whole group of equal scores is left
  out. It is *exhausted* when no more than ``fetch`` children match. ``fetch``
  starts at ``max(fetch_k, k)`` and doubles until ``k`` results exist or the
  search is exhausted. Hits rank by score, ties in document order (source key,
  then split id).
* **parent.** One result per parent of a hit, ranked by its best hit (ties in
  document order); the first ``k``. ``matches``: every hit inside.
* **window.** Hits seed windows best first. A hit inside an earlier window of
  its source joins it (a match; it widens nothing). Any other hit, while fewer
  than ``k`` windows exist, seeds a window of the free splits around it, at
  most ``before``/``after`` splits away: it stops where an earlier window
  begins. Touching windows stay separate results. Without ``coalesce`` the
  ``k`` best hits each get their full window and only their own match.
* **multilevel.** One context per source, ranked by best hit; the first ``k``.
  Evidence: the source's hits within ``margin`` of its best and not below the
  score of the query's ``fetch_k``-th hit (the best always counts). The
  context is the lowest node that holds all evidence. When the contexts
  together exceed 1,024 tokens, the budget rule below applies with 1,024 and
  its first ``k`` results are returned.
* **max_tokens (every mode): a ceiling.** One search ``fetch_k`` deep (deeper,
  doubling, only while fewer than ``fetch_k`` hits came back because a group
  of equal scores above 0 and within ``margin`` of the best was left out at
  the cut). The seeds are the evidence: among the first ``fetch_k`` hits, the
  ones scoring above 0 and within ``margin`` of the best, rank ``r`` from 0,
  weight ``1 / (r + 1)``.
  If no seed's own text fits the budget, nothing comes back. A leaf inside a
  seed's reach (window: ``before``/``after``; parent: the seed's parent;
  multilevel: its source) is worth ``weight / 2 ** distance``, summed over the
  seeds; the floor is the weakest seed's weight, or half the best one's if
  that is less. First every seed is chosen, best first, if its tokens
  (``ceil(chars / 4)``, or the token counter's) fit what is left. Then,
  repeatedly, the most valuable leaf worth at least the floor that touches a
  chosen leaf (ties: nearer a seed, then source key, then split id) is chosen
  if it fits what is left, else never again. Each run of consecutive chosen
  leaves is a result (``escalation`` ``"budget"``, its ``split_ids`` and
  ``tokens``), ranked by the best seed inside; in multilevel mode each carries
  the ``context`` of its source (sources numbered by their best result). A
  counter that charges the merged runs more than the budget gets the last
  chosen leaves back until they fit.
* **hybrid (under a budget).** The dense search goes ``max(fetch_k, 100)``
  deep. BM25 (from its formula, over every leaf of the index, with the
  library's analyser) ranks the leaves that pass the filter; its 100 best and
  the dense hits are fused by ``z(dense) + 0.3 z(BM25)``, and that order is the
  rank order of the rule above (scores stay the cosines; a leaf only BM25 found
  gets its cosine from the index). Each result and match carries its
  ``fused_score``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.core.keys import encode_source_key, node_key
from langchain_s2b.store.lexical_index import analyze

Spans = Callable[[str], list[tuple[int, int]]]
"""A level's exact splitting: text -> raw spans (before tiling)."""


# Spans ------------------------------------------------------------------------------


def separated_spans(separator: str) -> Spans:
    """Spans of the pieces between matches of ``separator`` (whitespace-only pieces dropped)."""

    def spans(text: str) -> list[tuple[int, int]]:
        cuts = [0]
        for m in re.finditer(separator, text):
            cuts += [m.start(), m.end()]
        cuts.append(len(text))
        pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts), 2)]
        return [(a, b) for a, b in pairs if text[a:b].strip()]

    return spans


def marked_spans(split_text: Callable[[str], list[str]], keep: str) -> Spans:
    """Exact spans of a splitter whose cuts depend only on ``keep`` chars and lengths.

    Every other character is replaced by a character of its own (Unicode
    private use), the splitter runs on that text, and each chunk is found at
    its one and only place. Right for LangChain's character splitters.
    """

    def spans(text: str) -> list[tuple[int, int]]:
        marked = "".join(
            c if c.isspace() or c in keep else chr(0xF0000 + i) for i, c in enumerate(text)
        )
        out = []
        for chunk in split_text(marked):
            if not chunk.strip():
                continue
            start = marked.index(chunk)
            assert marked.count(chunk) == 1, chunk
            out.append((start, start + len(chunk)))
        return out

    return spans


def tile(spans: Sequence[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """The tiling contract: the first span starts at 0, each reaches the next one's start."""
    ordered = sorted(set(spans))
    if not ordered:
        return [(0, length)] if length else []
    out = []
    for i, (start, end) in enumerate(ordered):
        nxt = ordered[i + 1][0] if i + 1 < len(ordered) else length
        out.append((0 if i == 0 else start, max(end, nxt)))
    return out


# The tree ---------------------------------------------------------------------------


@dataclass
class Node:
    """One node: its level, ordinal, span and parent."""

    source: Source
    level: str
    split_id: int
    start: int
    end: int
    parent: Node | None

    @property
    def key(self) -> str:
        return node_key(self.source.key, self.level, self.split_id)

    @property
    def chain(self) -> list[Node]:
        """Enclosing nodes, nearest first, up to the document."""
        out, node = [], self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


@dataclass
class Source:
    """One source with its nodes, level by level (finest first, the document last)."""

    source_id: str
    text: str
    metadata: dict[str, Any]
    levels: dict[str, list[Node]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return encode_source_key(self.source_id)


def build(
    source_id: str, text: str, metadata: dict[str, Any], levels: Sequence[tuple[str, Spans]]
) -> Source:
    """Split ``text`` level by level (coarsest first), each inside its parents."""
    source = Source(source_id, text, metadata)
    parents = [Node(source, "doc", 0, 0, len(text), None)]
    source.levels["doc"] = parents
    for name, spans in reversed(levels):
        nodes: list[Node] = []
        for parent in parents:
            inner = text[parent.start : parent.end]
            for a, b in tile(spans(inner), len(inner)):
                nodes.append(
                    Node(source, name, len(nodes), parent.start + a, parent.start + b, parent)
                )
        source.levels[name] = nodes
        parents = nodes
    return source


def leaves(source: Source, leaf_level: str) -> list[Node]:
    """The embedded leaves of a source: none when its text is blank, none without a letter."""
    if not source.text.strip():
        return []
    nodes = source.levels[leaf_level]
    return [n for n in nodes if any(c.isalpha() for c in source.text[n.start : n.end])]


# Search -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """A child the search returned, with its score."""

    node: Node
    score: float

    @property
    def order(self) -> tuple[float, str, int]:
        return (-self.score, self.node.source.key, self.node.split_id)

    def match(self) -> dict[str, Any]:
        n = self.node
        return {"key": n.key, "split_id": n.split_id, "score": self.score, "start": n.start}


def settle(ranked: list[Hit], fetch: int) -> tuple[list[Hit], bool]:
    """The search contract: ``fetch`` best, minus a tie group the cut would split."""
    if len(ranked) <= fetch:
        return ranked, True
    cut = ranked[fetch - 1].score
    if ranked[fetch].score < cut:
        return ranked[:fetch], False
    return [h for h in ranked[:fetch] if h.score > cut], False


Oracle = Callable[[int], list[Hit]]
"""``fetch`` -> the matching children the index ranks (all of them for an exact index)."""


# Results ----------------------------------------------------------------------------


def matches(hits: Sequence[Hit], start: int, end: int) -> list[dict[str, Any]]:
    """Citation records of the hits inside ``[start, end)``, in text order."""
    inside = [h for h in hits if start <= h.node.start and h.node.end <= end]
    out = []
    for h in sorted(inside, key=lambda h: h.node.start):
        record = h.match()
        record["end"] = h.node.end
        out.append(record)
    return out


def result(
    source: Source, start: int, end: int, hits: Sequence[Hit], mode: str, level: str, **extra: Any
) -> Document:
    """A result document with the metadata every result carries."""
    found = matches(hits, start, end)
    meta = {
        **source.metadata,
        "score": max(m["score"] for m in found),
        "mode": mode,
        "source_id": source.source_id,
        "start": start,
        "end": end,
        "level": level,
        "matches": found,
    }
    doc_id = extra.pop("id", None)
    meta.update(extra)
    return Document(page_content=source.text[start:end], metadata=meta, id=doc_id)


def tokens(n_chars: int) -> int:
    """The budget's token estimate."""
    return math.ceil(n_chars / 4)


# Modes ------------------------------------------------------------------------------


@dataclass
class Settings:
    """The retrieval options the reference reads."""

    k: int = 4
    fetch_k: int = 16
    before: int = 3
    after: int = 3
    coalesce: bool = True
    max_tokens: int | None = None
    margin: float = 0.06
    token_counter: Callable[[str], int] | None = None
    """``None``: ``ceil(chars / 4)``."""
    lexical: Lexical | None = None
    """Hybrid search under a budget (``None``: dense only)."""
    trace: dict[str, Any] = field(default_factory=dict)
    """What a run computed on the way (``fused``: the fused scores), for the tests."""


@dataclass
class Lexical:
    """What hybrid search reads: the query text and every leaf the child index holds."""

    query: str
    leaves: list[Node]
    passes: Callable[[Node], bool]
    """Whether a leaf passes the call's filter."""
    cosine: Callable[[Node], float]
    """A leaf's score against the query, as the child index gives it."""


MULTILEVEL_BUDGET = 1024


def parent_mode(hits: list[Hit], s: Settings) -> tuple[int, list[Document]]:
    """(number of candidate results, the results)."""
    by_parent: dict[int, tuple[Node, list[Hit]]] = {}
    for hit in hits:
        parent = hit.node.parent
        assert parent is not None
        by_parent.setdefault(id(parent), (parent, []))[1].append(hit)
    ranked = sorted(
        by_parent.values(),
        key=lambda pair: (-max(h.score for h in pair[1]), pair[0].source.key, pair[0].start),
    )
    docs = [
        result(p.source, p.start, p.end, hs, "parent", p.level, id=p.key) for p, hs in ranked[: s.k]
    ]
    return len(ranked), docs


def window_mode(hits: list[Hit], s: Settings) -> tuple[int, list[Document]]:
    """(number of windows, the results)."""
    windows: list[tuple[Source, int, int, list[Hit]]] = []
    owner: dict[tuple[str, int], int] = {}
    for hit in hits:
        node = hit.node
        here = (node.source.key, node.split_id)
        if s.coalesce and here in owner:
            windows[owner[here]][3].append(hit)
            continue
        if len(windows) >= s.k:
            continue
        n = len(node.source.levels[node.level])
        lo = hi = node.split_id
        key = node.source.key
        while lo - 1 >= max(0, node.split_id - s.before) and free(owner, key, lo - 1, s):
            lo -= 1
        while hi + 1 <= min(n - 1, node.split_id + s.after) and free(owner, key, hi + 1, s):
            hi += 1
        for j in range(lo, hi + 1):
            owner.setdefault((node.source.key, j), len(windows))
        windows.append((node.source, lo, hi, [hit]))
    docs = []
    for source, lo, hi, members in windows:
        nodes = source.levels[members[0].node.level][lo : hi + 1]
        start, end = nodes[0].start, max(n.end for n in nodes)
        extra = {"split_ids": list(range(lo, hi + 1)), "missing_split_ids": [], "gaps": []}
        docs.append(result(source, start, end, members, "window", nodes[0].level, **extra))
    return len(windows), docs


def free(owner: dict[tuple[str, int], int], key: str, split: int, s: Settings) -> bool:
    """Whether a split can join a new window (always, without ``coalesce``)."""
    return not s.coalesce or (key, split) not in owner


def multilevel_mode(hits: list[Hit], s: Settings) -> tuple[int, list[Document]]:
    """(number of sources hit, the results)."""
    by_source: dict[str, list[Hit]] = {}
    for hit in hits:
        by_source.setdefault(hit.node.source.key, []).append(hit)
    ranked = sorted(by_source.items(), key=lambda item: (-item[1][0].score, item[0]))
    scores = [h.score for h in hits]
    floor = scores[min(s.fetch_k, len(scores)) - 1] if scores else -math.inf
    docs: list[Document] = []
    for rank_no, (_, source_hits) in enumerate(ranked[: s.k]):
        best = source_hits[0].score
        cut = max(best - s.margin, min(floor, best))
        evidence = [h for h in source_hits if h.score >= cut]
        docs += [part(evidence, p, rank_no) for p in context(evidence)]
    return len(ranked), docs


@dataclass
class Part:
    """One multilevel result before it is built: nodes joined."""

    nodes: list[Node]
    label: str

    @property
    def span(self) -> tuple[int, int]:
        return self.nodes[0].start, max(n.end for n in self.nodes)


def context(evidence: list[Hit]) -> list[Part]:
    """The parts of one context: the lowest common node of the evidence (joined runs)."""
    chains = [h.node.chain for h in evidence]
    depth = min(len(c) for c in chains)
    top = next(i for i in range(depth) if len({id(c[i]) for c in chains}) == 1)
    why = "single-parent" if top == 0 else "spans-parents"
    nodes = {id(c[top]): c[top] for c in chains}
    return [Part(p.nodes, why) for p in joined(sorted(nodes.values(), key=lambda n: n.start))]


def joined(nodes: list[Node]) -> list[Part]:
    """Adjacent or overlapping nodes (sorted by start) joined into runs."""
    runs: list[Part] = []
    for node in nodes:
        if runs and node.start <= runs[-1].span[1]:
            runs[-1].nodes.append(node)
        else:
            runs.append(Part([node], ""))
    return runs


def part(evidence: list[Hit], p: Part, rank_no: int) -> Document:
    """Build one multilevel part."""
    start, end = p.span
    node = p.nodes[0]
    extra: dict[str, Any] = {"escalation": p.label, "context": rank_no, "id": node.key}
    if len(p.nodes) > 1:
        extra["keys"] = [n.key for n in p.nodes]
    return result(node.source, start, end, evidence, "multilevel", node.level, **extra)


# Hybrid search: BM25 from its formula, fused with the dense list by z-scores ----------

K1, B = 1.2, 0.75
"""BM25's parameters (tantivy's, Lucene's)."""
TOP_N = 100
LEXICAL_WEIGHT = 0.3


def bm25(
    query: list[str], docs: Mapping[str, list[str]], *, idf_of: str = "lucene"
) -> dict[str, float]:
    """Each document's BM25 score for the query terms (documents with none left out).

    ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` with ``N`` documents, ``n`` of
    them holding the term (``idf_of="lucene"``: tantivy's); ``idf_of="fts5"``:
    SQLite FTS5's ``ln((N - n + 0.5) / (n + 0.5))``, 1e-6 where that is not
    above 0. A term counts ``tf (k1 + 1) / (tf + k1 (1 - b + b |D| / avgdl))``.
    """
    n_docs = len(docs)
    if not n_docs:
        return {}
    avgdl = sum(len(terms) for terms in docs.values()) / n_docs
    holding: dict[str, int] = {}
    for terms in docs.values():
        for term in set(terms):
            holding[term] = holding.get(term, 0) + 1
    out = {}
    for key, terms in docs.items():
        total = 0.0
        for term in dict.fromkeys(query):
            tf = terms.count(term)
            if tf:
                n = holding[term]
                if idf_of == "fts5":
                    idf = max(math.log((n_docs - n + 0.5) / (n + 0.5)), 0.0) or 1e-6
                else:
                    idf = math.log(1 + (n_docs - n + 0.5) / (n + 0.5))
                total += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(terms) / avgdl))
        if total > 0:
            out[key] = total
    return out


def standardised(values: list[float]) -> list[float]:
    """``(x - mean) / std`` (population); all equal -> zeros."""
    if not values or max(values) == min(values):
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / std for v in values]


def fuse(dense: list[Hit], lexical: Lexical, depth: int) -> tuple[list[Hit], dict[str, float]]:
    """The dense hits and the ``depth`` best BM25 leaves that pass the filter, by fused score.

    ``z(dense) + 0.3 z(BM25)``, each standardised over its own list; a leaf
    one list lacks gets that list's lowest z. Ties: dense order, then the
    lexical list's (BM25, then key).
    """
    node_of = {n.key: n for n in lexical.leaves}
    docs = {
        n.key: analyze(n.source.text[n.start : n.end]) for n in lexical.leaves
    }  # statistics over every leaf of the index, whatever the filter
    scores = bm25(analyze(lexical.query), docs)
    ranked = sorted(
        ((k, v) for k, v in scores.items() if lexical.passes(node_of[k])),
        key=lambda pair: (-pair[1], pair[0]),
    )[:depth]
    by_key = {h.node.key: h for h in dense}
    for key, _ in ranked:
        by_key.setdefault(key, Hit(node_of[key], lexical.cosine(node_of[key])))
    zd = dict(zip([h.node.key for h in dense], standardised([h.score for h in dense]), strict=True))
    zl = dict(zip([k for k, _ in ranked], standardised([v for _, v in ranked]), strict=True))
    low_d, low_l = min(zd.values(), default=0.0), min(zl.values(), default=0.0)
    order = list(dict.fromkeys([h.node.key for h in dense] + [k for k, _ in ranked]))
    fused = {k: zd.get(k, low_d) + LEXICAL_WEIGHT * zl.get(k, low_l) for k in order}
    position = {k: i for i, k in enumerate(order)}
    keys = sorted(order, key=lambda k: (-fused[k], position[k]))
    return [by_key[k] for k in keys], fused


# The budget -------------------------------------------------------------------------


def budgeted(mode: str, oracle: Oracle, s: Settings, budget: int) -> list[Document]:
    """The budget rule of the module docstring, step by step."""
    count = s.token_counter or (lambda text: tokens(len(text)))
    fetch = max(s.fetch_k, TOP_N) if s.lexical is not None else s.fetch_k
    while True:
        ranked = sorted(oracle(fetch), key=lambda h: h.order)
        hits, exhausted = settle(ranked, fetch)
        hits = sorted(hits, key=lambda h: h.order)
        tied = ranked[fetch - 1].score if not exhausted and len(hits) < fetch else None
        # a group of equal scores left out at the cut is searched for whole if it may count
        if tied is None or tied <= 0 or len(hits) >= s.fetch_k:
            break
        if hits and tied < hits[0].score - s.margin:
            break
        fetch *= 2
    fused: dict[str, float] | None = None
    if s.lexical is not None:
        hits, fused = fuse(hits, s.lexical, fetch)
        s.trace["fused"] = fused
    best = max((h.score for h in hits), default=0.0)
    seeds = [h for h in hits[: s.fetch_k] if h.score > 0 and h.score >= best - s.margin]

    def text(node: Node) -> str:
        return node.source.text[node.start : node.end]

    if not any(count(text(h.node)) <= budget for h in seeds):
        return []
    weight = [1.0 / (r + 1) for r in range(len(seeds))]
    floor = min(min(weight), 0.5 * max(weight))
    value: dict[tuple[str, int], float] = {}
    nodes: dict[tuple[str, int], Node] = {}
    seen: set[tuple[str, int]] = set()
    for r, seed in enumerate(seeds):
        here = (seed.node.source.key, seed.node.split_id)
        if here in seen:
            continue
        seen.add(here)
        for node in reach(seed.node, mode, s):
            place = (node.source.key, node.split_id)
            distance = abs(node.split_id - seed.node.split_id)
            value[place] = value.get(place, 0.0) + weight[r] * 0.5**distance
            nodes[place] = node
    seed_at: dict[tuple[str, int], int] = {}
    for r, h in enumerate(seeds):
        seed_at.setdefault((h.node.source.key, h.node.split_id), r)

    def nearest(place: tuple[str, int]) -> int:
        return min(abs(place[1] - p[1]) for p in seed_at if p[0] == place[0])

    chosen: list[tuple[str, int]] = []
    left = budget
    for place in seed_at:  # the hits first, best first, each if it fits
        cost = count(text(nodes[place]))
        if cost <= left:
            chosen.append(place)
            left -= cost
    dropped: set[tuple[str, int]] = set()
    while left > 0:  # then context, most valuable first, never below the floor
        open_ = [
            p
            for p in value
            if p not in chosen
            and p not in dropped
            and value[p] >= floor
            and ((p[0], p[1] - 1) in chosen or (p[0], p[1] + 1) in chosen)
        ]
        if not open_:
            break
        pick = min(open_, key=lambda p: (-value[p], nearest(p), p[0], p[1]))
        cost = count(text(nodes[pick]))
        if cost <= left:
            chosen.append(pick)
            left -= cost
        else:
            dropped.add(pick)

    def spans(places: list[tuple[str, int]]) -> list[tuple[Node, int, int]]:
        out = []
        for run in runs_of(sorted(places)):
            first = nodes[run[0]]
            out.append((first, first.start, max(nodes[p].end for p in run)))
        return out

    # a counter that charges merged text more than its parts: the last chosen go back
    while sum(count(n.source.text[a:b]) for n, a, b in spans(chosen)) > budget:
        chosen.pop()
    docs = []
    for run in runs_of(sorted(chosen)):
        first = nodes[run[0]]
        inside = [seeds[seed_at[p]] for p in run if p in seed_at]
        start, end = first.start, max(nodes[p].end for p in run)
        doc = result(
            first.source,
            start,
            end,
            inside,
            mode,
            first.level,
            escalation="budget",
            split_ids=[p[1] for p in run],
            tokens=count(first.source.text[start:end]),
        )
        rank = min(seed_at[p] for p in run if p in seed_at)
        if fused is not None:
            doc.metadata["fused_score"] = fused[seeds[rank].node.key]
            for match in doc.metadata["matches"]:
                match["fused_score"] = fused[match["key"]]
        docs.append((rank, doc))
    ordered = [doc for _, doc in sorted(docs, key=lambda pair: pair[0])]
    if mode == "multilevel":
        contexts: dict[str, int] = {}
        for doc in ordered:
            doc.metadata["context"] = contexts.setdefault(doc.metadata["source_id"], len(contexts))
    return ordered


def reach(node: Node, mode: str, s: Settings) -> list[Node]:
    """The leaves a seed may grow into: its window, its parent, or its whole source."""
    level = node.source.levels[node.level]
    lo, hi = 0, len(level) - 1
    if mode == "window":
        lo, hi = max(lo, node.split_id - s.before), min(hi, node.split_id + s.after)
    out = level[lo : hi + 1]
    if mode == "parent":
        out = [n for n in out if n.parent is node.parent]
    return out


def runs_of(places: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Consecutive leaves of one source, grouped."""
    runs: list[list[tuple[str, int]]] = []
    for p in places:
        if runs and runs[-1][-1][0] == p[0] and runs[-1][-1][1] + 1 == p[1]:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


MODES: Mapping[str, Callable[[list[Hit], Settings], tuple[int, list[Document]]]] = {
    "parent": parent_mode,
    "window": window_mode,
    "multilevel": multilevel_mode,
}


def retrieve(mode: str, oracle: Oracle, s: Settings) -> list[Document]:
    """The documents ``invoke`` must return, given what the index ranks."""
    if s.max_tokens is not None:
        return budgeted(mode, oracle, s, s.max_tokens)
    docs = by_k(mode, oracle, s)
    count = s.token_counter or (lambda text: tokens(len(text)))
    if mode == "multilevel" and sum(count(d.page_content) for d in docs) > MULTILEVEL_BUDGET:
        return budgeted(mode, oracle, s, MULTILEVEL_BUDGET)[: s.k]
    return docs


def by_k(mode: str, oracle: Oracle, s: Settings) -> list[Document]:
    """Without a budget: ``fetch`` doubles until ``k`` results exist."""
    fetch = max(s.fetch_k, s.k)
    while True:
        ranked = sorted(oracle(fetch), key=lambda h: h.order)
        hits, exhausted = settle(ranked, fetch)
        hits = sorted(hits, key=lambda h: h.order)
        count, docs = MODES[mode](hits, s)
        if count >= s.k or exhausted:
            return docs
        fetch *= 2
