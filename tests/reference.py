"""A slow, obviously correct statement of every retrieval mode's contract (tests only).

It works from three things only: the source texts, each level's exact spans
(computed by the caller, not by the library), and the score the child index
gives each child. :func:`retrieve` returns the ``Document`` list that
``SmallToBigRetriever.invoke`` must return, metadata included.

The contract, written once here:

* **Search.** A search ``fetch`` deep returns the ``fetch`` best children that
  pass the filter. When the ``fetch``-th and the next child score the same,
  the engine chose among equals, so that whole group of equal scores is left
  out. It is *exhausted* when no more than ``fetch`` children match. Hits rank
  by score, ties in document order (source key, then split id).
* **Relevance.** The scale of a query is the mean and standard deviation of
  the first 100 scores of the search (a group of equal scores left out at the
  cut counts with its score); a hit's relevance is its z-score on it
  (no spread: 0). With hybrid search, BM25 (from its formula, over every leaf
  of the index, with the library's analyser) ranks the leaves that pass the
  filter; its 100 best (equal scores by key) join the dense hits (a leaf only
  BM25 found gets its cosine from the index), the fused score is
  ``z + 0.3 z(BM25)`` (BM25's z-scores over its own list; a leaf it did not
  return gets its lowest), the
  hits rank by it (ties: the dense order, then BM25's), and the relevance is
  its z-score on the scale of the first 100 fused scores. ``fused_score`` on
  each result (its best match's) and match is the fused score. The
  *evidence*: hits scoring above 0 whose relevance is within ``margin`` of
  the best.
* **Reranker.** With one, the first ``fetch_k`` hits of that ranking (twice as
  many each time the search doubles) go to it as documents (the child's text,
  its key as ``id``); the ones it returns, in its order, are the hits, each
  with its ``rerank_score`` (its ``relevance_score`` when it gives one for every
  document, else ``(n - place) / n``), the relevance the z-score of those. No
  deeper child is evidence, and when it dropped any no deeper search follows.
* **Depth.** The first search is ``max(fetch_k, k)`` deep, at least 100 when
  relevance is read (hybrid search, multilevel and pack modes, ``k=None``),
  and doubles until the mode has ``k`` results, or, with ``k=None`` (only
  under a budget; without one it means 4), until no child left out could be
  evidence (one scoring above 0 whose dense z-score, plus under hybrid search
  0.3 times BM25's lowest z, on the relevance scale, reaches the bar: the best
  relevance of the hits and of that child, less ``margin``), or the search is
  exhausted. The best child left out is read from every child: a group of
  equal scores the cut left out has its own score, and when it is wider than
  the search (no hit at all), it is the best there is and the search goes on;
  else the last hit's score bounds what the search did not see.
* **Headers** (``contextual_headers=True``). A leaf's header is its source's
  title (its ``title`` metadata, else its first Markdown heading) and the
  headings in force where its first non-space character is (a heading of level
  ``n`` ends every open one of level ``n`` or deeper), joined by ``" > "``; the
  first heading of that path is left out when its letters and digits equal the
  title's (case-folded). The index embeds, and BM25 reads, ``header + "\n\n" + text``
  (the text alone when the header is empty); everything returned is the source
  text. A result's ``heading`` is its best match's header (highest score; of
  equal scores, the first in the text), when not empty.
* **Results.** Every result carries its ``tokens``. parent: one per parent of
  a hit, ranked by its best-ranked hit; ``matches``: the hits inside. window:
  hits seed windows best first; a hit inside an earlier window of its source
  joins it (it widens nothing); any other hit, while fewer than ``k`` windows
  exist, seeds a window of the free splits around it, at most
  ``before``/``after`` splits away (``level`` ``"window"``). Without
  ``coalesce`` the ``k`` best hits each get their full window and only their
  own match. multilevel: one context per source. A hit scoring 0 or less never
  joins another hit's result. The first ``k`` results are kept; with
  ``k=None`` every one that holds evidence.
* **max_tokens (parent, window): a ceiling.** Results in rank order, each
  whole (with its ``tokens``) when its tokens (``ceil(chars / 4)``, or the
  token counter's) fit what is left; else cut: from its best hit whose own
  leaf fits, a run of leaves inside the result grows one leaf at a time
  towards the neighbour worth more (``0.5 ** distance`` summed over the
  result's hits; ties: the one before) while the run's text fits; a result
  none of whose hits fits is passed over. A cut run: ``level`` the leaf
  level, ``escalation`` ``"cut"``, ``cut_from`` (the whole's level, key for a
  node, span), ``split_ids``, ``tokens``.
* **multilevel.** Always under a ceiling (``max_tokens``, else 1,024). A
  context's evidence: the query's evidence in its source, else its best hit.
  Its node: the lowest one that holds all of it (``single-parent`` at the
  leaves' parent, else ``spans-parents``). Contexts in order: a node that fits
  what is left is placed whole; one that does not splits its evidence by the
  child of the node each hit lies in, and each part (in order of its best hit)
  is placed the same way from its own lowest node; a part whose leaves'
  parent does not fit waits, and the tokens of its best hit's leaf are held
  for it when they fit what is left. Placing stops at ``k`` results, waiting
  parts that hold tokens counted. Then each waiting part, while fewer than
  ``k`` results exist, with what is left plus what was held for it, gets a
  run cut from that parent around its hits, as above. Results
  carry ``context`` (their source's place among the contexts) and ``tokens``,
  ordered by context, then start.
* **pack.** Under a ceiling (``max_tokens``, else 1,024). The seeds are the
  evidence, rank ``r`` from 0, weight ``1 / (r + 1)``. If no seed's own text
  fits, nothing comes back. A leaf in a seed's window (``before``/``after``)
  is worth ``weight / 2 ** distance``, summed over the seeds; the floor is the
  weakest seed's weight, or half the best one's if that is less. Repeatedly,
  the most valuable leaf worth at least the floor that is a seed or touches a
  chosen leaf (ties: nearer a seed, then source key, then split id) is chosen
  if it fits what is left, else never again. Each run of consecutive chosen leaves is a result
  (``escalation`` ``"budget"``, ``split_ids``, ``tokens``, ``context``),
  ranked by the best seed inside; the first ``k``. A counter that charges the
  merged runs more than the budget gets the last chosen leaves back.
* **Proxies** (issue 35). A proxy is a child of its own (its text embedded,
  keyed ``<source>/proxy/<n>``, ``n`` its place among its source's proxies)
  that stands for a span ``[start, end)`` of its source. The search and the
  scale see it as any child; then each proxy hit becomes a hit on every
  embedded leaf whose span meets its span, at its score, and the proxy is
  gone. A leaf met several times keeps its best score (of equal scores its own
  hit, then the proxy written first), and a hit through a proxy says so in its
  match: ``proxy`` ``{key, kind, text}``. Everything after is a leaf hit's.
  (Hybrid search with proxies is not stated here.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.core.keys import encode_source_key, node_key
from langchain_s2b.core.splitters import SentenceSplitter
from langchain_s2b.store.lexical.analyzer import analyze

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
    heading: str = ""
    """Its contextual header (leaves, with headers on: :func:`add_headers`)."""
    proxy: tuple[str, str] | None = None
    """A proxy's ``(kind, text)`` (:func:`add_proxy`); ``None`` for a node of the tree."""
    covers: tuple[Node, ...] = ()
    """A proxy's embedded leaves whose spans meet its span."""

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
    proxies: list[Node] = field(default_factory=list)

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


_ATX = re.compile(r"^(#{1,6}) +(\S.*?) *$", re.MULTILINE)


def _folded(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def add_headers(source: Source, leaf_level: str) -> None:
    """Give each leaf of ``source`` its header (the contract above; Markdown ``#`` headings)."""
    text = source.text
    headings = [
        (m.start(), len(m.group(1)), " ".join(m.group(2).split())) for m in _ATX.finditer(text)
    ]
    given = source.metadata.get("title")
    title = " ".join(given.split()) if isinstance(given, str) and given.strip() else ""
    if not title and headings:
        title = headings[0][2]
    for node in source.levels[leaf_level]:
        first = node.start
        while first < node.end and text[first].isspace():
            first += 1
        open_: list[tuple[int, str]] = []
        for at, level, name in headings:
            if at <= first:
                open_ = [(lv, n) for lv, n in open_ if lv < level] + [(level, name)]
        path = [n for _, n in open_]
        if path and title and _folded(path[0]) == _folded(title):
            path.pop(0)
        node.heading = " > ".join(p for p in [title, *path] if p)


def add_proxy(
    source: Source, leaf_level: str, text: str, start: int, end: int, kind: str = "user"
) -> Node:
    """A proxy of ``source`` standing for ``[start, end)``: every embedded leaf it meets."""
    met = tuple(n for n in leaves(source, leaf_level) if n.start < end and start < n.end)
    node = Node(source, "proxy", len(source.proxies), start, end, None, proxy=(kind, text))
    node.covers = met
    source.proxies.append(node)
    return node


def through_proxies(hits: list[Hit]) -> list[Hit]:
    """Each proxy hit as a hit on every leaf it covers; a leaf keeps its best (see Proxies)."""
    best: dict[str, Hit] = {}
    for h in hits:
        if h.node.proxy is None:
            found = [h]
        else:
            kind, text = h.node.proxy
            found = [Hit(leaf, h.score, (h.node.key, kind, text)) for leaf in h.node.covers]
        for f in found:
            held = best.get(f.node.key)
            if held is None or _preferred(f) > _preferred(held):
                best[f.node.key] = f
    return sorted(best.values(), key=lambda h: h.order)


def _preferred(h: Hit) -> tuple[float, bool, int]:
    """The better of two hits on one leaf: the higher score, its own, the first proxy."""
    n = -1 if h.proxy is None else int(h.proxy[0].rpartition("/")[2])
    return (h.score, h.proxy is None, -n)


def embedded(node: Node) -> str:
    """What the index embeds and BM25 reads for a leaf: its header, then its text."""
    if node.proxy is not None:
        return node.proxy[1]  # a proxy: its own text
    text = node.source.text[node.start : node.end]
    return f"{node.heading}\n\n{text}" if node.heading else text


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
    proxy: tuple[str, str, str] | None = None
    """``(key, kind, text)`` of the proxy it came through."""

    @property
    def order(self) -> tuple[float, str, int]:
        return (-self.score, self.node.source.key, self.node.split_id)

    def match(self) -> dict[str, Any]:
        n = self.node
        out = {"key": n.key, "split_id": n.split_id, "score": self.score, "start": n.start}
        if self.proxy is not None:
            key, kind, text = self.proxy
            out["proxy"] = {"key": key, "kind": kind, "text": text}
        return out


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
    inside = [h for h in hits if start <= h.node.start and h.node.end <= end]
    best = min(inside, key=lambda h: (-h.score, h.node.start))
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
    if best.node.heading:
        meta["heading"] = best.node.heading
    doc_id = extra.pop("id", None)
    meta.update(extra)
    return Document(page_content=source.text[start:end], metadata=meta, id=doc_id)


def tokens(n_chars: int) -> int:
    """The budget's token estimate."""
    return math.ceil(n_chars / 4)


# Settings ---------------------------------------------------------------------------

DEFAULT_K = 4
STATS_DEPTH = 100
TOP_N = 100
LEXICAL_WEIGHT = 0.3
MULTILEVEL_BUDGET = 1024


@dataclass
class Settings:
    """The retrieval options the reference reads."""

    k: int | None = 4
    fetch_k: int = 16
    before: int = 3
    after: int = 3
    coalesce: bool = True
    max_tokens: int | None = None
    margin: float = 1.0
    confidence: float = 1.0
    """Confident evidence: within this many std devs of the best cosine's z (and evidence)."""
    token_counter: Callable[[str], int] | None = None
    """``None``: ``ceil(chars / 4)``."""
    lexical: Lexical | None = None
    """Hybrid search (``None``: dense only)."""
    reranker: Any = None
    """A ``BaseDocumentCompressor`` reordering the first children (``None``: none)."""
    query: str = ""
    """The query text (what a reranker reads)."""
    trace: dict[str, Any] = field(default_factory=dict)
    """What a run computed on the way (``fused``: the fused scores), for the tests."""

    @property
    def count(self) -> int | None:
        """At most this many results; ``None``: as many as fit (``k=None`` with a budget)."""
        if self.k is None and self.max_tokens is None:
            return DEFAULT_K
        return self.k

    def tokens_of(self, text: str) -> int:
        return self.token_counter(text) if self.token_counter else tokens(len(text))


@dataclass
class Lexical:
    """What hybrid search reads: the query text and every leaf the child index holds."""

    query: str
    leaves: list[Node]
    passes: Callable[[Node], bool]
    """Whether a leaf passes the call's filter."""
    cosine: Callable[[Node], float]
    """A leaf's score against the query, as the child index gives it."""
    text: Callable[[Node], str] = field(default=lambda node: text_of(node))
    """What BM25 reads of a leaf (with headers: :func:`embedded`)."""


def text_of(node: Node) -> str:
    return node.source.text[node.start : node.end]


# Ranking: z-scores of the query's own scores, BM25 fused --------------------------------


@dataclass
class Ranking:
    """One search's hits in rank order, each hit's relevance, and what may lie deeper."""

    hits: list[Hit]
    relevance: dict[str, float]
    exhausted: bool
    bound: float | None
    """The best relevance a child the search did not return may have (``None``: none)."""
    fused: dict[str, float] | None = None
    reranked: dict[str, float] | None = None
    dense: dict[str, float] = field(default_factory=dict)
    """Each hit's cosine as a z-score on the query's first 100 cosines."""


def z_of(scores: list[float]) -> Callable[[float], float]:
    """The z-score on the scale of the first 100 scores (no spread: 0)."""
    top = scores[:STATS_DEPTH]
    if not top or max(top) == min(top):
        return lambda x: 0.0
    mean = sum(top) / len(top)
    std = math.sqrt(sum((v - mean) ** 2 for v in top) / len(top))
    return lambda x: (x - mean) / std


def rank(oracle: Oracle, s: Settings, depth: int) -> Ranking:
    ranked = sorted(oracle(depth), key=lambda h: h.order)  # every child (an exact index)
    hits, exhausted = settle(ranked, depth)
    hits = sorted(hits, key=lambda h: h.order)
    z = z_of([h.score for h in ranked[: min(depth, STATS_DEPTH)]])  # a left-out tie counts
    last: float | None = None
    if not exhausted:
        # The best child left out, read from every child: the search kept a prefix of the
        # ranking, so the first child after it is the best left out. When the cut left out a
        # group of equal scores, that is the group's own score (however wide the group: it
        # may hold every child the search could have returned); else the search cannot see
        # past its last hit, so that hit's score bounds the rest.
        left_out = ranked[len(hits)]
        last = left_out.score if left_out.score == ranked[depth - 1].score else hits[-1].score
    hits = through_proxies(hits)  # after the scale and the bound: as searched
    if s.lexical is None:
        relevance = {h.node.key: z(h.score) for h in hits}
        bound = None if last is None or last <= 0 else z(last)
        return Ranking(hits, relevance, exhausted, bound, dense=dict(relevance))
    lex = s.lexical
    node_of = {n.key: n for n in lex.leaves}
    docs = {n.key: analyze(lex.text(n)) for n in lex.leaves}  # every leaf, whatever the filter
    scores = bm25(analyze(lex.query), docs)
    best = sorted(
        ((k, v) for k, v in scores.items() if lex.passes(node_of[k])),
        key=lambda pair: (-pair[1], pair[0]),
    )[:TOP_N]
    by_key = {h.node.key: h for h in hits}
    for key, _ in best:
        by_key.setdefault(key, Hit(node_of[key], lex.cosine(node_of[key])))
    zl = dict(zip([k for k, _ in best], standardised([v for _, v in best]), strict=True))
    low = min(zl.values(), default=0.0)
    fused = {k: z(h.score) + LEXICAL_WEIGHT * zl.get(k, low) for k, h in by_key.items()}
    position = {k: i for i, k in enumerate(by_key)}
    keys = sorted(by_key, key=lambda k: (-fused[k], position[k]))
    s.trace["fused"] = fused
    zf = z_of([fused[k] for k in keys])  # relevance: on the scale of the fused scores
    bound = None if last is None or last <= 0 else zf(z(last) + LEXICAL_WEIGHT * low)
    relevance = {k: zf(fused[k]) for k in keys}
    dense = {k: z(h.score) for k, h in by_key.items()}
    return Ranking([by_key[k] for k in keys], relevance, exhausted, bound, fused, dense=dense)


def rerank(r: Ranking, s: Settings, query: str, n: int) -> Ranking:
    """The first ``n`` hits as the reranker orders them; the rest are gone.

    Its ``relevance_score`` (given for all) or ``(n - place) / n`` is the
    ``rerank_score``; relevance is its z-score; no deeper child is evidence.
    """
    top = r.hits[:n]
    if s.reranker is None or not top:
        return r
    docs = [
        Document(
            page_content=text_of(h.node),
            metadata={"key": h.node.key, "source_id": h.node.source.source_id, "score": h.score},
            id=h.node.key,
        )
        for h in top
    ]
    by_key = {h.node.key: h for h in top}
    kept: list[tuple[Hit, Any]] = []
    for doc in s.reranker.compress_documents(docs, query):
        key = doc.id if doc.id in by_key else doc.metadata["key"]
        if all(h.node.key != key for h, _ in kept):
            kept.append((by_key[key], doc.metadata.get("relevance_score")))
    if all(isinstance(x, int | float) and not isinstance(x, bool) for _, x in kept):
        scores = {h.node.key: float(score) for h, score in kept}
    else:
        scores = {h.node.key: (len(kept) - p) / len(kept) for p, (h, _) in enumerate(kept)}
    hits = [h for h, _ in kept]
    z = z_of([scores[h.node.key] for h in hits])
    done = len(kept) < len(top) or (r.exhausted and len(top) == len(r.hits))
    fused = None if r.fused is None else {h.node.key: r.fused[h.node.key] for h in hits}
    relevance = {k: z(v) for k, v in scores.items()}
    return Ranking(hits, relevance, done, None, fused, scores, {k: r.dense[k] for k in scores})


def evidence(r: Ranking, s: Settings) -> list[Hit]:
    """Hits above 0 whose relevance is within ``margin`` of the best relevance."""
    if not r.hits:
        return []
    bar = max(r.relevance.values()) - s.margin
    return [h for h in r.hits if h.score > 0 and r.relevance[h.node.key] >= bar]


def confident(r: Ranking, s: Settings) -> list[Hit]:
    """The evidence whose cosine's z-score is within ``confidence`` of the best one's."""
    found = evidence(r, s)
    if not found:
        return []
    best = max(r.dense[h.node.key] for h in found)
    return [h for h in found if r.dense[h.node.key] >= best - s.confidence]


# Units: what one result of each mode is, before any ceiling ----------------------------


@dataclass
class Unit:
    """One result: its source, its hits (rank order), and its span."""

    source: Source
    hits: list[Hit]
    node: Node | None = None
    """Parent mode and multilevel contexts: the node (parent) or none (a context)."""
    lo: int = 0
    hi: int = 0
    """Window mode: the window's split ids."""


def parent_units(hits: list[Hit], s: Settings) -> list[Unit]:
    units: dict[int, Unit] = {}
    for hit in hits:
        parent = hit.node.parent
        assert parent is not None
        if id(parent) not in units:
            units[id(parent)] = Unit(hit.node.source, [hit], node=parent)
        elif hit.score > 0:
            units[id(parent)].hits.append(hit)
    return list(units.values())


def window_units(hits: list[Hit], s: Settings) -> list[Unit]:
    windows: list[Unit] = []
    owner: dict[tuple[str, int], int] = {}
    for hit in hits:
        node = hit.node
        here = (node.source.key, node.split_id)
        if s.coalesce and here in owner:
            if hit.score > 0:
                windows[owner[here]].hits.append(hit)
            continue
        if s.count is not None and len(windows) >= s.count:
            if s.coalesce:
                continue
            break
        n = len(node.source.levels[node.level])
        lo = hi = node.split_id
        key = node.source.key
        while lo - 1 >= max(0, node.split_id - s.before) and free(owner, key, lo - 1, s):
            lo -= 1
        while hi + 1 <= min(n - 1, node.split_id + s.after) and free(owner, key, hi + 1, s):
            hi += 1
        for j in range(lo, hi + 1):
            owner.setdefault((key, j), len(windows))
        windows.append(Unit(node.source, [hit], lo=lo, hi=hi))
    return windows


def free(owner: dict[tuple[str, int], int], key: str, split: int, s: Settings) -> bool:
    """Whether a split can join a new window (always, without ``coalesce``)."""
    return not s.coalesce or (key, split) not in owner


def context_units(hits: list[Hit], s: Settings) -> list[Unit]:
    by_source: dict[str, Unit] = {}
    for hit in hits:
        key = hit.node.source.key
        if key not in by_source:
            by_source[key] = Unit(hit.node.source, [hit])
        elif hit.score > 0:
            by_source[key].hits.append(hit)
    return list(by_source.values())


UNITS: Mapping[str, Callable[[list[Hit], Settings], list[Unit]]] = {
    "parent": parent_units,
    "window": window_units,
    "multilevel": context_units,
    "pack": lambda hits, s: [Unit(h.node.source, [h]) for h in hits],
}


# Retrieval ----------------------------------------------------------------------------


def retrieve(mode: str, oracle: Oracle, s: Settings) -> list[Document]:
    """The documents ``invoke`` must return, given what the index ranks."""
    scaled = s.lexical is not None or mode in ("multilevel", "pack") or s.count is None
    depth = first = max(s.fetch_k, s.count or 0, STATS_DEPTH if scaled else 0)
    while True:
        r = rerank(rank(oracle, s, depth), s, s.query, s.fetch_k * depth // first)
        units = UNITS[mode](r.hits, s)
        if r.exhausted:
            break
        if s.count is not None:
            if len(units) >= s.count:
                break
        elif not deeper_may_hold_evidence(r, s):
            break
        depth *= 2
    chosen = choose(units, r, s)
    if mode == "multilevel":
        docs = multilevel(chosen, r, s)
    elif mode == "pack":
        docs = pack(r, s)
    else:
        docs = held(mode, chosen, r, s)
    for name, scores in (("fused_score", r.fused), ("rerank_score", r.reranked)):
        if scores is not None:
            for doc in docs:
                matches = doc.metadata["matches"]
                for m in matches:
                    m[name] = scores[m["key"]]
                doc.metadata[name] = max(m[name] for m in matches)
    return docs


def deeper_may_hold_evidence(r: Ranking, s: Settings) -> bool:
    """Whether a child the search left out could be evidence (``k=None``).

    It could when one scoring above 0 (``bound`` is set) may be within
    ``margin`` of the best relevance of the hits *and of itself*: when the
    search returned no hit at all (a group of equal scores wider than the
    search, left out whole), the best child left out is the best there is.
    """
    if r.bound is None:
        return False
    return r.bound >= max([*r.relevance.values(), r.bound]) - s.margin


def choose(units: list[Unit], r: Ranking, s: Settings) -> list[Unit]:
    """The first ``k``; with ``k=None``, every unit that holds evidence."""
    if s.count is not None:
        return units[: s.count]
    found = {h.node.key for h in evidence(r, s)}
    return [u for u in units if any(h.node.key in found for h in u.hits)]


def whole(mode: str, unit: Unit) -> Document:
    """A parent or window result, whole."""
    if mode == "parent":
        p = unit.node
        assert p is not None
        return result(p.source, p.start, p.end, unit.hits, "parent", p.level, id=p.key)
    nodes = unit.source.levels[unit.hits[0].node.level][unit.lo : unit.hi + 1]
    start, end = nodes[0].start, max(n.end for n in nodes)
    extra = {"split_ids": list(range(unit.lo, unit.hi + 1)), "missing_split_ids": [], "gaps": []}
    return result(unit.source, start, end, unit.hits, "window", "window", **extra)


def held(mode: str, units: list[Unit], r: Ranking, s: Settings) -> list[Document]:
    """Each result whole when all fit; a reached ceiling: evidence first (:class:`Shelf`)."""
    docs = [whole(mode, u) for u in units]
    for doc in docs:
        doc.metadata["tokens"] = s.tokens_of(doc.page_content)
    if s.max_tokens is None or sum(d.metadata["tokens"] for d in docs) <= s.max_tokens:
        return docs
    hits_fit = any(s.tokens_of(text_of(h.node)) <= s.max_tokens for u in units for h in u.hits)
    if mode == "window" and not hits_fit:  # parent mode may cut a hit's sentence
        return []
    found = {h.node.key for h in evidence(r, s)}
    shelf = Shelf(s, r, s.max_tokens)
    for unit in units:
        every = unit.source.levels[unit.hits[0].node.level]
        if mode == "window":
            inside = every[unit.lo : unit.hi + 1]
        else:
            p = unit.node
            assert p is not None
            inside = [n for n in every if p.start <= n.start and n.end <= p.end]
        hits = [h for h in unit.hits if h.node.key in found] or unit.hits[:1]
        shelf.slots.append(Slot(unit.source, hits, {n.split_id: n for n in inside}))
    if mode != "parent":
        shelf.seed()
    else:  # a hit's chunk when it costs at most a quarter of the budget, else its sentence
        shelf.seed_parents(len(units), s.max_tokens)
        fines = list(zip(shelf.owner, shelf.slots[len(units) :], strict=True))
        for index, (unit, doc) in enumerate(zip(units, docs, strict=True)):
            p = unit.node
            assert p is not None
            parts = [shelf.slots[index], *(f for i, f in fines if i == index)]
            if any(part.chosen for part in parts):
                shelf.take(parts, p.start, p.end, doc.metadata["tokens"], parts[:1])
    shelf.grow()
    out = []
    ranks = shelf.rank
    extra = list(zip(shelf.owner, shelf.slots[len(units) :], strict=True))
    for index, (doc, slot) in enumerate(zip(docs, shelf.slots, strict=False)):
        mine = [f for i, f in extra if i == index]
        runs = [(slot, run) for slot in [slot, *mine] for run in slot.runs()]
        span = (doc.metadata["start"], doc.metadata["end"])
        if slot.whole or (len(runs) == 1 and runs[0][0] is slot and slot.span(runs[0][1]) == span):
            out.append(doc)
            continue
        cut_from: dict[str, Any] = {"level": doc.metadata["level"]}
        if mode == "parent":
            cut_from["key"] = doc.id
        cut_from.update(start=doc.metadata["start"], end=doc.metadata["end"])
        for part, run in sorted(
            runs, key=lambda pr: min(ranks[pr[0].key_of(h)] for h in pr[0].hits_in(pr[1]))
        ):
            out.append(part.cut(run, mode, cut_from, s))
    return out


@dataclass
class Slot:
    """Where one result's runs may grow (its leaves by split id), its hits, what it holds."""

    source: Source
    hits: list[Hit]
    inside: dict[int, Node]
    chosen: set[int] = field(default_factory=set)
    whole: bool = False
    leaf_of: dict[int, int] = field(default_factory=dict)
    """Parent mode's sentences: the leaf each lies in."""
    stands_for: dict[str, Hit] = field(default_factory=dict)
    """Parent mode's sentences: the match each hit sentence stands for."""
    leaves: dict[int, Node] = field(default_factory=dict)
    """Parent mode's sentences: the leaves they were cut from."""

    def key_of(self, hit: Hit) -> str:
        """The key the ranking knows a hit by (a sentence's: its leaf's)."""
        return self.stands_for[hit.node.key].node.key if self.stands_for else hit.node.key

    def runs(self) -> list[list[int]]:
        out: list[list[int]] = []
        for split in sorted(self.chosen):
            if out and out[-1][-1] + 1 == split:
                out[-1].append(split)
            else:
                out.append([split])
        return out

    def span(self, run: list[int]) -> tuple[int, int]:
        return self.inside[run[0]].start, max(self.inside[i].end for i in run)

    def cost(self, s: Settings) -> int:
        return sum(s.tokens_of(self.source.text[slice(*self.span(run))]) for run in self.runs())

    def hits_in(self, run: list[int]) -> list[Hit]:
        return [h for h in self.hits if run[0] <= h.node.split_id <= run[-1]]

    def cut(self, run: list[int], mode: str, cut_from: dict[str, Any], s: Settings) -> Document:
        start, end = self.span(run)
        hits = [self.stands_for.get(h.node.key, h) for h in self.hits_in(run)]
        leaves = sorted({self.leaf_of.get(i, i) for i in run})
        return result(
            self.source,
            start,
            end,
            hits,
            mode,
            hits[0].node.level,
            split_ids=list(range(leaves[0], leaves[-1] + 1)),
            tokens=s.tokens_of(self.source.text[start:end]),
            escalation="cut",
            cut_from=cut_from,
        )


SENTENCES = SentenceSplitter(max_tokens=10**9)


def sentences_of(slot: Slot, query: str) -> Slot:
    """Parent mode's fine cuts: the slot's leaves cut into sentences, numbered in text order
    (a missing leaf leaves a gap); each hit is the sentence of its leaf sharing the most
    with the query, each shared word weighing log(n / df) over the leaf's n sentences (of
    equal ones the first), matched as its leaf with that span."""
    words = {w.casefold() for w in re.findall(r"\w+", query)}
    inside: dict[int, Node] = {}
    leaf_of: dict[int, int] = {}
    number, previous = 0, None
    for split in sorted(slot.inside):
        node = slot.inside[split]
        number += previous is not None and split != previous + 1
        previous = split
        text = text_of(node)
        for a, b in tile(SENTENCES.split_spans(text), len(text)):
            level = f"sentence~{min(n.start for n in slot.inside.values())}"
            inside[number] = Node(slot.source, level, number, node.start + a, node.start + b, None)
            leaf_of[number] = split
            number += 1
    hits, stands_for = [], {}
    for h in slot.hits:
        mine = [i for i, leaf in leaf_of.items() if leaf == h.node.split_id]
        if not mine:
            continue
        shared = {
            i: words & {w.casefold() for w in re.findall(r"\w+", text_of(inside[i]))} for i in mine
        }
        df = {w: sum(w in found for found in shared.values()) for w in words}
        score = {i: sum(math.log(len(mine) / df[w]) for w in found) for i, found in shared.items()}
        best = max(mine, key=lambda i: (score[i], -i))
        sentence = inside[best]
        hits.append(Hit(sentence, h.score, h.proxy))
        n = h.node
        match = Node(
            n.source, n.level, n.split_id, sentence.start, sentence.end, n.parent, n.heading
        )
        stands_for[sentence.key] = Hit(match, h.score, h.proxy)
    return Slot(
        slot.source, hits, inside, leaf_of=leaf_of, stands_for=stands_for, leaves=slot.inside
    )


@dataclass
class Shelf:
    """A reached ceiling: evidence leaves first, wholes that pay, then context by worth."""

    s: Settings
    r: Ranking
    budget: int
    slots: list[Slot] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)
    """Parent mode's fine slots (after the results' own): the result each belongs to."""
    wholes: int = 0
    """Tokens of the nodes taken whole."""

    @property
    def rank(self) -> dict[str, int]:
        return {h.node.key: i for i, h in enumerate(self.r.hits)}

    def spent(self) -> int:
        return self.wholes + sum(slot.cost(self.s) for slot in self.slots if not slot.whole)

    def returning(self) -> set[str]:
        """A trial by worth alone over the hits and their neighbours together; the hits it
        took come back, and every hit as relevant as one of them."""
        trial = Shelf(self.s, self.r, self.budget)
        for slot in self.slots:
            trial.slots.append(
                Slot(
                    slot.source,
                    slot.hits,
                    slot.inside,
                    set(),
                    False,
                    slot.leaf_of,
                    slot.stands_for,
                    slot.leaves,
                )
            )
        trial.grow(hits_too=True)
        taken = {
            slot.key_of(h)
            for slot in trial.slots
            for h in slot.hits
            if h.node.split_id in slot.chosen
        }
        tied = [self.r.relevance[key] for key in taken]
        return taken | {
            slot.key_of(h)
            for slot in self.slots
            for h in slot.hits
            if self.r.relevance[slot.key_of(h)] in tied
        }

    def seed(self) -> None:
        """Each returning hit's own leaf, in rank order, while it fits; never a result past k."""
        rank = self.rank
        back = self.returning()
        order = sorted(
            (
                (rank[slot.key_of(h)], i, h)
                for i, slot in enumerate(self.slots)
                for h in slot.hits
                if slot.key_of(h) in back
            ),
            key=lambda entry: entry[:2],
        )
        self.place([(i, h) for _, i, h in order])

    def seed_parents(self, n: int, budget: int) -> None:
        """Parent mode: each hit in rank order gets its chunk when the chunk costs at most a
        quarter of the budget or holds one sentence; else the chunk, cut into sentences,
        becomes a slot of its own (the result's own no longer holds it) and the hit gets the
        sentence that stands for it."""
        rank = self.rank
        order = sorted(
            ((rank[h.node.key], i, h) for i, slot in enumerate(self.slots[:n]) for h in slot.hits),
            key=lambda entry: entry[:2],
        )
        for _, i, h in order:
            slot, split = self.slots[i], h.node.split_id
            if slot.whole or split in slot.chosen or split not in slot.inside:
                continue
            text = text_of(h.node)
            if self.s.tokens_of(text) * 4 <= budget or len(SENTENCES.split_spans(text)) <= 1:
                self.place([(i, h)])
                continue
            node = slot.inside.pop(split)
            fine = sentences_of(Slot(slot.source, [h], {split: node}), self.s.query)
            self.slots.append(fine)
            self.owner.append(i)
            self.place([(len(self.slots) - 1, sub) for sub in fine.hits])

    def place(self, order: list[tuple[int, Hit]]) -> None:
        for i, h in order:
            slot, split = self.slots[i], h.node.split_id
            if slot.whole or split in slot.chosen or split not in slot.inside:
                continue
            alone = split - 1 not in slot.chosen and split + 1 not in slot.chosen
            runs = sum(len(other.runs()) for other in self.slots)
            if alone and self.s.count is not None and runs >= self.s.count:
                continue
            self.add(slot, split)

    def add(self, slot: Slot, split: int) -> bool:
        slot.chosen.add(split)
        if self.spent() <= self.budget:
            return True
        slot.chosen.discard(split)
        return False

    def take(
        self,
        slots: list[Slot],
        start: int,
        end: int,
        node_tokens: int,
        cover_from: list[Slot] | None = None,
    ) -> bool:
        """Take a node whole when it fits and its placed evidence covers enough of it."""
        held = sum(slot.cost(self.s) for slot in slots)
        extra = node_tokens - held
        left = self.budget - self.spent()
        if extra > left:
            return False
        reach = max(self.s.before, self.s.after, 1)
        covered: set[tuple[int, int]] = set()
        for slot in slots if cover_from is None else cover_from:
            for h in slot.hits:
                if h.node.split_id not in slot.chosen:
                    continue
                center = slot.leaf_of.get(h.node.split_id, h.node.split_id)
                leaves = slot.leaves or slot.inside  # coverage counts leaves, not sentences
                for split in range(center - reach, center + reach + 1):
                    node = leaves.get(split)
                    if node is not None and start <= node.start and node.end <= end:
                        covered.add((node.start, node.end))
        cover = sum(b - a for a, b in covered) / (end - start) if end > start else 1.0
        if cover < (self.spent() + extra) / self.budget:
            return False
        for slot in slots:
            slot.whole = True
        self.wholes += node_tokens
        return True

    def grow(self, *, hits_too: bool = False) -> None:
        """The most valuable leaf next to a run (or, ``hits_too``, any hit's own), while it
        fits; one that does not, or would start a result past ``k``, never."""
        rank = self.rank
        dropped: set[tuple[int, int]] = set()
        while self.budget - self.spent() > 0:
            options = []
            for i, slot in enumerate(self.slots):
                if slot.whole:
                    continue
                own = {h.node.split_id for h in slot.hits} if hits_too else set()
                for split in slot.inside:
                    if split in slot.chosen or (i, split) in dropped:
                        continue
                    touching = split - 1 in slot.chosen or split + 1 in slot.chosen
                    if not touching and split not in own:
                        continue
                    value = sum(
                        0.5 ** abs(split - h.node.split_id) / (rank[slot.key_of(h)] + 1)
                        for h in slot.hits
                    )
                    near = min(abs(split - h.node.split_id) for h in slot.hits)
                    options.append((-value, near, slot.source.key, split, i, touching))
            if not options:
                return
            *_, split, i, touching = min(options)
            runs = sum(len(slot.runs()) for slot in self.slots)
            past_k = not touching and self.s.count is not None and runs >= self.s.count
            if past_k or not self.add(self.slots[i], split):
                dropped.add((i, split))


def lowest_common(evidence: list[Hit]) -> int:
    """The index (in each chain) of the lowest node that holds every hit."""
    chains = [h.node.chain for h in evidence]
    depth = min(len(c) for c in chains)
    return next((i for i in range(depth) if len({id(c[i]) for c in chains}) == 1), depth - 1)


def multilevel(contexts: list[Unit], r: Ranking, s: Settings) -> list[Document]:
    """Each context's cover (over its confident evidence) and the paragraphs of the rest,
    whole when all fit; else evidence first, nodes that pay, context by worth."""
    found = {h.node.key for h in evidence(r, s)}
    sure = {h.node.key for h in confident(r, s)}
    budget = s.max_tokens if s.max_tokens is not None else MULTILEVEL_BUDGET
    plans = []
    for number, ctx in enumerate(contexts):
        ev = [h for h in ctx.hits if h.node.key in found] or ctx.hits[:1]
        top = [h for h in ev if h.node.key in sure] or ev[:1]
        level = lowest_common(top)
        plans.append((number, ev, top, level, "single-parent" if level == 0 else "spans-parents"))
    if not any(s.tokens_of(text_of(h.node)) <= budget for _, ev, _, _, _ in plans for h in ev):
        return []
    entries = []
    for number, ev, top, level, why in plans:
        cover = top[0].node.chain[level]
        within = [h for h in ev if cover.start <= h.node.start and h.node.end <= cover.end]
        place = {h.node.key: i for i, h in enumerate(contexts[number].hits)}
        entries.append(((number, place[within[0].node.key]), number, cover, within, why))
        outside: dict[int, list[Hit]] = {}
        for h in ev:
            if h not in within:
                outside.setdefault(id(h.node.chain[0]), []).append(h)
        for hits in outside.values():
            para = hits[0].node.chain[0]
            entries.append(((number, place[hits[0].node.key]), number, para, hits, "single-parent"))
    entries.sort(key=lambda e: e[0])
    if s.count is not None:
        entries = entries[: s.count]
    if sum(s.tokens_of(text_of(e[2])) for e in entries) <= budget:
        wholes = [(number, node, hits, why) for _, number, node, hits, why in entries]
        return _ordered([_node_doc(n, node, hits, why, s) for n, node, hits, why in wholes])
    shelf = Shelf(s, r, budget)
    owner: list[int] = []
    index: dict[tuple[int, int], int] = {}
    for number, ev, _, _, _ in plans:
        for h in ev:
            para = h.node.chain[0]
            if (number, id(para)) not in index:
                index[number, id(para)] = len(shelf.slots)
                every = para.source.levels[h.node.level]
                inside = {
                    n.split_id: n for n in every if para.start <= n.start and n.end <= para.end
                }
                shelf.slots.append(Slot(para.source, [], inside))
                owner.append(number)
            shelf.slots[index[number, id(para)]].hits.append(h)
    shelf.seed()
    wholes: list[tuple[int, Node, list[Hit], str]] = []

    def take(number: int, node: Node, why: str) -> bool:
        inside = [
            slot
            for slot, n in zip(shelf.slots, owner, strict=True)
            if n == number
            and not slot.whole
            and node.start <= slot.hits[0].node.start
            and slot.hits[0].node.end <= node.end
        ]
        if not any(slot.chosen for slot in inside):
            return False
        if not shelf.take(inside, node.start, node.end, s.tokens_of(text_of(node))):
            return False
        hits = sorted((h for slot in inside for h in slot.hits), key=lambda h: h.node.start)
        wholes.append((number, node, hits, why))
        return True

    def visit(number: int, top: list[Hit], level: int, why: str) -> None:
        if take(number, top[0].node.chain[level], why) or level == 0:
            return
        parts: dict[int, list[Hit]] = {}
        for h in top:
            parts.setdefault(id(h.node.chain[level - 1]), []).append(h)
        for part in parts.values():
            inner = lowest_common(part)
            visit(number, part, inner, "single-parent" if inner == 0 else "spans-parents")

    for number, _, top, level, why in plans:
        visit(number, top, level, why)
    for slot, number in zip(shelf.slots, owner, strict=True):
        if not slot.whole and slot.chosen:
            take(number, slot.hits[0].node.chain[0], "single-parent")
    shelf.grow()
    docs = [_node_doc(n, node, hits, why, s) for n, node, hits, why in wholes]
    for slot, number in zip(shelf.slots, owner, strict=True):
        if slot.whole:
            continue
        para = slot.hits[0].node.chain[0]
        for run in slot.runs():
            if slot.span(run) == (para.start, para.end):
                docs.append(_node_doc(number, para, slot.hits_in(run), "single-parent", s))
                continue
            cut_from = {"level": para.level, "key": para.key, "start": para.start, "end": para.end}
            piece = slot.cut(run, "multilevel", cut_from, s)
            piece.metadata["context"] = number
            docs.append(piece)
    return _ordered(docs)


def _node_doc(number: int, node: Node, hits: list[Hit], why: str, s: Settings) -> Document:
    inside = [h for h in hits if node.start <= h.node.start and h.node.end <= node.end]
    return result(
        node.source,
        node.start,
        node.end,
        inside,
        "multilevel",
        node.level,
        escalation=why,
        context=number,
        tokens=s.tokens_of(text_of(node)),
        id=node.key,
    )


def _ordered(docs: list[Document]) -> list[Document]:
    return sorted(docs, key=lambda d: (d.metadata["context"], d.metadata["start"]))


# Pack: hits first, then context by value, anywhere in the document ---------------------


def pack(r: Ranking, s: Settings) -> list[Document]:
    """Seeds: the evidence, rank ``r`` weighing ``1 / (r + 1)``; the free allocation."""
    budget = s.max_tokens if s.max_tokens is not None else MULTILEVEL_BUDGET
    seeds = evidence(r, s)
    if not any(s.tokens_of(text_of(h.node)) <= budget for h in seeds):
        return []
    weight = [1.0 / (i + 1) for i in range(len(seeds))]
    floor = min(min(weight), 0.5 * max(weight))
    value: dict[tuple[str, int], float] = {}
    nodes: dict[tuple[str, int], Node] = {}
    seen: set[tuple[str, int]] = set()
    for i, seed in enumerate(seeds):
        here = (seed.node.source.key, seed.node.split_id)
        if here in seen:
            continue
        seen.add(here)
        every = seed.node.source.levels[seed.node.level]
        lo, hi = max(0, seed.node.split_id - s.before), seed.node.split_id + s.after
        for node in every[lo : hi + 1]:  # its window: before / after leaves
            place = (node.source.key, node.split_id)
            distance = abs(node.split_id - seed.node.split_id)
            value[place] = value.get(place, 0.0) + weight[i] * 0.5**distance
            nodes[place] = node
    seed_at: dict[tuple[str, int], int] = {}
    for i, h in enumerate(seeds):
        seed_at.setdefault((h.node.source.key, h.node.split_id), i)

    def nearest(place: tuple[str, int]) -> int:
        return min(abs(place[1] - p[1]) for p in seed_at if p[0] == place[0])

    chosen: list[tuple[str, int]] = []
    left = budget
    dropped: set[tuple[str, int]] = set()
    while left > 0:  # a seed or a neighbour of a chosen leaf, most valuable first, >= floor
        open_ = [
            p
            for p in value
            if p not in chosen
            and p not in dropped
            and value[p] >= floor
            and (p in seed_at or (p[0], p[1] - 1) in chosen or (p[0], p[1] + 1) in chosen)
        ]
        if not open_:
            break
        pick = min(open_, key=lambda p: (-value[p], nearest(p), p[0], p[1]))
        cost = s.tokens_of(text_of(nodes[pick]))
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
    while sum(s.tokens_of(n.source.text[a:b]) for n, a, b in spans(chosen)) > budget:
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
            "pack",
            first.level,
            escalation="budget",
            split_ids=[p[1] for p in run],
            tokens=s.tokens_of(first.source.text[start:end]),
        )
        docs.append((min(seed_at[p] for p in run if p in seed_at), doc))
    ordered = [doc for _, doc in sorted(docs, key=lambda pair: pair[0])]
    contexts: dict[str, int] = {}
    for doc in ordered:
        doc.metadata["context"] = contexts.setdefault(doc.metadata["source_id"], len(contexts))
    return ordered if s.count is None else ordered[: s.count]


def runs_of(places: list[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """Consecutive leaves of one source, grouped."""
    runs: list[list[tuple[str, int]]] = []
    for p in places:
        if runs and runs[-1][-1][0] == p[0] and runs[-1][-1][1] + 1 == p[1]:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


# BM25 from its formula, and z-scores -------------------------------------------------

K1, B = 1.2, 0.75
"""BM25's parameters (tantivy's, Lucene's)."""


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
