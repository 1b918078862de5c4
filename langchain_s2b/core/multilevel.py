"""Multilevel mode: escalation sentence -> paragraph -> section -> document, under a ceiling.

One *context* per source document, best document first. Its *evidence* is the
query's evidence (:mod:`~langchain_s2b.core.relevance`) inside it, or, for a
document that holds none (reached only to give ``k`` contexts), its best hit.
The context is the smallest node of the ladder that covers the evidence:
their paragraph when they share one (``single-parent``), else the section or
document that covers them (``spans-parents``). With ``merge_threshold`` set,
the ratio rule of LlamaIndex/Haystack also applies: when more than that share
of a node's children hold evidence, the node is taken (``ratio``).

The mode always has a ceiling: ``max_tokens``, or
:data:`~langchain_s2b.core.budget.MULTILEVEL_BUDGET` when the call names none.
A covering node that fits what is left comes back whole. One that does not is
split: its evidence is grouped by the child of the node each hit lies in, and
each group gets the smallest node that covers it and fits (splitting again as
needed, best group first). A group whose paragraph does not fit keeps its
place in rank order: the tokens of its best hit's own leaf are held for it
(when they fit what is left) and it then counts towards ``k``, so a weaker
group placed whole after it can never crowd out the best evidence. Only after
every context was placed this way do those groups get runs cut from their
paragraph around their hits (:mod:`~langchain_s2b.core.ceiling`), with what
is left and what was held for them. ``k`` counts the results; each carries
its ``context`` (its document's place among the documents returned).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core.budget import MULTILEVEL_BUDGET, TokenCounter
from langchain_s2b.core.ceiling import RING, Bounds, Leaves, cut_document
from langchain_s2b.core.hits import (
    Candidate,
    Group,
    Hit,
    MissingNodeError,
    all_read,
    result_metadata,
)
from langchain_s2b.core.keys import level_of
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.place import (
    Run,
    Slot,
    as_cut,
    coverage,
    grow,
    pays,
    placed,
    read_around,
    returning,
    seed,
)
from langchain_s2b.core.ranking import Ranked
from langchain_s2b.core.relevance import confident, evidence
from langchain_s2b.core.requests import Fetch, Op, ask

Ancestor = tuple[str, int, int, int]
"""``(key, start, end, n_children)`` of a node above a leaf."""


def group(hits: Sequence[Candidate], params: QueryParams) -> list[Group]:
    """One candidate context per source document, best document first."""
    by_source: dict[str, Group] = {}
    for hit in all_read(hits):
        if not hit.ancestors:
            msg = f"Child {hit.key!r} has no ancestors metadata; re-index it."
            raise ValueError(msg)
        if hit.source_key not in by_source:
            by_source[hit.source_key] = Group(
                hit.source_key, hit.source_id, [], [], hit.level, -1, -1
            )
        elif hit.score <= 0:  # a child that shares nothing with the query is no match
            continue
        by_source[hit.source_key].hits.append(hit)
    return list(by_source.values())


def common_level(hits: Sequence[Hit]) -> int:
    """Index (into ``ancestors``) of the lowest node that covers every hit."""
    depth = min(len(hit.ancestors) for hit in hits)
    for i in range(depth):
        if len({hit.ancestors[i][0] for hit in hits}) == 1:
            return i
    return depth - 1


def ratio_level(hits: Sequence[Hit], threshold: float) -> int:
    """Highest ancestor index reached by merging nodes whose children mostly hit.

    Starts at the best hit: its parent is taken when more than ``threshold``
    of the parent's children hold evidence, then that node's parent, and so
    on. ``-1`` when not even the first parent qualifies.
    """
    best = hits[0]
    reached = -1
    for i, (key, _, _, n_children) in enumerate(best.ancestors):
        inside = [h for h in hits if len(h.ancestors) > i and h.ancestors[i][0] == key]
        units = {h.key if i == 0 else h.ancestors[i - 1][0] for h in inside}
        if n_children <= 0 or len(units) / n_children <= threshold:
            break
        reached = i
    return reached


@dataclass(frozen=True)
class Context:
    """One document's evidence, its confident evidence, and the node that covers the latter."""

    number: int
    group: Group
    evidence: list[Hit]
    top: list[Hit]
    """The hits that decide the escalation: the confident evidence, else the best hit."""
    level: int
    """Index into the top hits' ``ancestors`` of the node that covers them."""
    why: str


def contexts(groups: Sequence[Group], ranking: Ranked, p: QueryParams) -> list[Context]:
    """The contexts to answer with: the first ``k``, or (``k=None``) those holding evidence."""
    found = {hit.key for hit in evidence(ranking.hits, ranking.relevance, p.margin)}
    sure = {
        hit.key
        for hit in confident(ranking.hits, ranking.relevance, ranking.scale, p.confidence, p.margin)
    }
    chosen = [g for g in groups if any(h.key in found for h in g.hits)]
    if p.count is not None:
        chosen = list(groups[: p.count])
    out = []
    for number, doc in enumerate(chosen):
        ev = [h for h in doc.hits if h.key in found] or doc.hits[:1]
        top = [h for h in ev if h.key in sure] or ev[:1]
        level = common_level(top)
        why = "single-parent" if level == 0 else "spans-parents"
        if p.merge_threshold is not None:
            by_ratio = ratio_level(top, p.merge_threshold)
            if by_ratio > level:
                level, why = by_ratio, "ratio"
        out.append(Context(number, doc, ev, top, level, why))
    return out


def node_keys(chosen: Sequence[Context]) -> list[str]:
    """Every node a context may be answered with: its cover, the nodes below, each paragraph."""
    keys: dict[str, None] = {}
    for ctx in chosen:
        for hit in ctx.top:
            keys.update((a[0], None) for a in hit.ancestors[: ctx.level + 1])
        keys.update((hit.ancestors[0][0], None) for hit in ctx.evidence)
    return list(keys)


Whole = tuple[Context, Ancestor, list[Hit], str]
"""A node taken whole: its context, the node, the evidence inside, why."""


def resolve(
    groups: list[Group], ranking: Ranked, params: QueryParams, on_missing: str
) -> Op[list[Document]]:
    """The ladder's nodes whole when they fit; a reached ceiling spent evidence first."""
    chosen = contexts(groups, ranking, params)
    budget = params.max_tokens if params.max_tokens is not None else MULTILEVEL_BUDGET
    counter = params.token_counter
    if not any(counter(hit.text) <= budget for ctx in chosen for hit in ctx.evidence):
        return []  # not one hit fits the ceiling: nothing to fetch
    keys = node_keys(chosen)
    values: list[Document | None] = []
    if keys:
        values = yield from ask(Fetch(keys))
    nodes = dict(zip(keys, values, strict=True))
    try:
        plain = _plain(chosen, nodes, params.count)
    except MissingNodeError:
        if on_missing == "raise":
            raise
        chosen = [ctx for ctx in chosen if _complete(ctx, nodes)]
        plain = _plain(chosen, nodes, params.count)
    if sum(counter(_text(node, nodes)) for _, node, _, _ in plain) <= budget:
        wholes = plain  # a ceiling the answer does not reach changes nothing
        docs = [
            _whole(ctx, node, ev, why, _doc(node, nodes), counter) for ctx, node, ev, why in wholes
        ]
        return _in_order(docs)
    return (yield from _ceiling(chosen, nodes, ranking, params, budget))


def _plain(
    chosen: Sequence[Context], nodes: Mapping[str, Document | None], count: int | None
) -> list[Whole]:
    """The answer when nothing is cut, at most ``count`` results.

    Each context's cover whole, and the paragraph of each evidence hit outside
    it, in context order and within a context best hit first.
    """
    entries: list[tuple[tuple[int, int], Whole]] = []
    rank = {hit.key: i for ctx in chosen for i, hit in enumerate(ctx.group.hits)}
    for ctx in chosen:
        cover = ctx.top[0].ancestors[ctx.level]
        _doc(cover, nodes)
        inside = [h for h in ctx.evidence if _within(h, cover)]
        entries.append(((ctx.number, rank[inside[0].key]), (ctx, cover, inside, ctx.why)))
        outside: dict[str, list[Hit]] = {}
        for hit in ctx.evidence:
            if not _within(hit, cover):
                outside.setdefault(hit.ancestors[0][0], []).append(hit)
        for hits in outside.values():
            node = hits[0].ancestors[0]
            _doc(node, nodes)
            entries.append(((ctx.number, rank[hits[0].key]), (ctx, node, hits, "single-parent")))
    entries.sort(key=lambda entry: entry[0])
    kept = [whole for _, whole in entries]
    return kept if count is None else kept[:count]


def _ceiling(
    chosen: Sequence[Context],
    nodes: Mapping[str, Document | None],
    ranking: Ranked,
    params: QueryParams,
    budget: int,
) -> Op[list[Document]]:
    """Evidence first, then nodes that pay, then runs by worth (:mod:`.place`)."""
    counter = params.token_counter
    ranks = {hit.key: rank for rank, hit in enumerate(ranking.hits)}
    ladder = _Ladder(nodes, counter, budget, max(params.before, params.after, 1))
    for ctx in chosen:
        for hit in ctx.evidence:
            ladder.slot_of(ctx, hit).hits.append(hit)
    slots = ladder.slots
    yield from read_around(slots, ladder.sources, max(RING, ladder.reach))
    back = yield from returning(
        slots, ranks, ranking.relevance, budget, params.count, counter, ladder.sources
    )
    order = sorted(
        ((ranks[h.key], i, h) for i, slot in enumerate(slots) for h in slot.hits if h.key in back),
        key=lambda entry: entry[:2],
    )
    order_ = [(i, h) for _, i, h in order]
    ladder.left = seed(slots, order_, budget, params.count, counter, ladder.sources)
    for ctx in chosen:
        ladder.visit(ctx, ctx.top, ctx.level, ctx.why)
    for index, slot in enumerate(slots):
        if not slot.whole and slot.runs:
            ladder.take(ladder.owner[index], slot.hits[0].ancestors[0], "single-parent")
    yield from grow(slots, ranks, ladder.left, counter, ladder.sources)
    docs = [
        _whole(ctx, node, ev, why, _doc(node, nodes), counter)
        for ctx, node, ev, why in ladder.wholes
    ]
    for index, slot in enumerate(slots):
        if not slot.whole:
            docs += [ladder.run_document(ladder.owner[index], slot, run) for run in slot.runs]
    return _in_order(docs)


@dataclass
class _Ladder:
    """A reached ceiling's placement: the paragraphs' slots, the nodes taken whole, the budget."""

    nodes: Mapping[str, Document | None]
    counter: TokenCounter
    budget: int
    reach: int
    """How many leaves on each side of a hit count as covered (:func:`.place.coverage`)."""
    left: int = 0
    slots: list[Slot] = field(default_factory=list)
    owner: list[Context] = field(default_factory=list)
    wholes: list[Whole] = field(default_factory=list)
    sources: dict[str, Leaves] = field(default_factory=dict)
    _index: dict[tuple[int, str], int] = field(default_factory=dict)

    def slot_of(self, ctx: Context, hit: Hit) -> Slot:
        """The slot of a hit's paragraph (in its context), made on first use."""
        para = hit.ancestors[0]
        index = self._index.get((ctx.number, para[0]))
        if index is None:
            index = self._index[ctx.number, para[0]] = len(self.slots)
            bounds = Bounds(start=para[1], end=para[2])
            self.slots.append(Slot(hit.source_key, hit.level, hit.n_splits, bounds, []))
            self.owner.append(ctx)
        return self.slots[index]

    def visit(self, ctx: Context, top: list[Hit], level: int, why: str) -> None:
        """Take the node over ``top`` whole when it pays, else the nodes below it."""
        before = len(self.wholes)
        self.take(ctx, top[0].ancestors[level], why)
        if len(self.wholes) > before or level == 0:
            return
        below: dict[str, list[Hit]] = {}
        for hit in top:
            below.setdefault(hit.ancestors[level - 1][0], []).append(hit)
        for part in below.values():
            inner = common_level(part)
            self.visit(ctx, part, inner, "single-parent" if inner == 0 else "spans-parents")

    def take(self, ctx: Context, node: Ancestor, why: str) -> None:
        """Take ``node`` whole when the evidence placed in it pays for it."""
        _, start, end, _ = node
        inside = [
            slot
            for slot, owner in zip(self.slots, self.owner, strict=True)
            if owner is ctx
            and not slot.whole
            and start <= slot.hits[0].start
            and slot.hits[0].end <= end
        ]
        if not any(slot.runs for slot in inside):
            return
        extra = self.counter(_text(node, self.nodes)) - sum(slot.tokens for slot in inside)
        cover = coverage(placed(inside), start, end, self.reach, self.sources)
        if not pays(cover, extra, self.left, self.budget):
            return
        for slot in inside:
            slot.whole = True
        hits = sorted((h for slot in inside for h in slot.hits), key=lambda h: h.start)
        self.wholes.append((ctx, node, hits, why))
        self.left -= extra

    def run_document(self, ctx: Context, slot: Slot, run: Run) -> Document:
        """A run as a result: its paragraph whole when it grew to all of it, else a cut."""
        found = as_cut(run, slot)
        para = slot.hits[0].ancestors[0]
        if (found.start, found.end) == (para[1], para[2]):
            return _whole(
                ctx, para, found.hits, "single-parent", _doc(para, self.nodes), self.counter
            )
        cut_from = {"level": level_of(para[0]), "key": para[0], "start": para[1], "end": para[2]}
        base = self.nodes.get(para[0])
        doc = cut_document(found, ctx.group, "multilevel", base.metadata if base else {}, cut_from)
        doc.metadata["context"] = ctx.number
        return doc


def _within(hit: Hit, node: Ancestor) -> bool:
    return node[1] <= hit.start and hit.end <= node[2]


def _doc(node: Ancestor, nodes: Mapping[str, Document | None]) -> Document:
    doc = nodes.get(node[0])
    if doc is None:
        msg = f"Node {node[0]!r} is in the child index's ancestry but not in the store."
        raise MissingNodeError(msg)
    return doc


def _text(node: Ancestor, nodes: Mapping[str, Document | None]) -> str:
    return _doc(node, nodes).page_content


def _complete(ctx: Context, nodes: Mapping[str, Document | None]) -> bool:
    """Whether every node a context may need is in the store."""
    return all(nodes.get(key) is not None for key in node_keys([ctx]))


def _in_order(docs: list[Document]) -> list[Document]:
    """Results by context (document rank), then by place in the document."""
    return sorted(docs, key=lambda d: (d.metadata["context"], d.metadata["start"]))


def _whole(
    ctx: Context, node: Ancestor, ev: list[Hit], why: str, doc: Document, counter: TokenCounter
) -> Document:
    """A node of the ladder, whole, as a result."""
    key, start, end, _ = node
    inside = [h for h in ev if start <= h.start and h.end <= end]
    part = Group(
        ctx.group.source_key, ctx.group.source_id, [key], inside, level_of(key), start, end, why
    )
    meta = result_metadata(part, "multilevel", doc.metadata)
    meta.update(context=ctx.number, tokens=counter(doc.page_content))
    return Document(page_content=doc.page_content, metadata=meta, id=key)
