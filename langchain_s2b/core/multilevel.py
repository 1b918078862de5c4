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
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.budget import MULTILEVEL_BUDGET, TokenCounter
from langchain_s2b.core.ceiling import Bounds, Leaves, cut, cut_document
from langchain_s2b.core.hits import Group, Hit, MissingNodeError, result_metadata
from langchain_s2b.core.keys import level_of
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.relevance import evidence
from langchain_s2b.core.requests import Fetch, Op, ask

Ancestor = tuple[str, int, int, int]
"""``(key, start, end, n_children)`` of a node above a leaf."""


def group(hits: Sequence[Hit], params: QueryParams) -> list[Group]:
    """One candidate context per source document, best document first."""
    by_source: dict[str, Group] = {}
    for hit in hits:
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
    """One document's evidence and the node that covers it."""

    number: int
    group: Group
    evidence: list[Hit]
    level: int
    """Index into the evidence's ``ancestors`` of the covering node."""
    why: str


def contexts(
    groups: Sequence[Group],
    ranked_hits: Sequence[Hit],
    relevance: Mapping[str, float],
    p: QueryParams,
) -> list[Context]:
    """The contexts to answer with: the first ``k``, or (``k=None``) those holding evidence."""
    found = {hit.key for hit in evidence(ranked_hits, relevance, p.margin)}
    chosen = [g for g in groups if any(h.key in found for h in g.hits)]
    if p.count is not None:
        chosen = list(groups[: p.count])
    out = []
    for number, doc in enumerate(chosen):
        ev = [h for h in doc.hits if h.key in found] or doc.hits[:1]
        level = common_level(ev)
        why = "single-parent" if level == 0 else "spans-parents"
        if p.merge_threshold is not None:
            by_ratio = ratio_level(ev, p.merge_threshold)
            if by_ratio > level:
                level, why = by_ratio, "ratio"
        out.append(Context(number, doc, ev, level, why))
    return out


def node_keys(chosen: Sequence[Context]) -> list[str]:
    """Every node a context may be answered with: the evidence's ancestors up to its cover."""
    keys: dict[str, None] = {}
    for ctx in chosen:
        for hit in ctx.evidence:
            keys.update((a[0], None) for a in hit.ancestors[: ctx.level + 1])
    return list(keys)


@dataclass
class _Placement:
    """What the ladder placed so far, and what is left of the budget."""

    left: int
    count: int | None
    wholes: list[tuple[Context, Ancestor, list[Hit], str]]
    cuts: list[tuple[Context, Ancestor, list[Hit], int]]
    """Groups that wait for a run, each with the tokens held for it."""

    @property
    def full(self) -> bool:
        held = sum(1 for *_, tokens in self.cuts if tokens)  # a cut that holds nothing may fail
        return self.count is not None and len(self.wholes) + held >= self.count


def resolve(
    groups: list[Group],
    ranked_hits: Sequence[Hit],
    relevance: Mapping[str, float],
    params: QueryParams,
    on_missing: str,
) -> Op[list[Document]]:
    """Place every context on the ladder within the ceiling; cut runs last."""
    chosen = contexts(groups, ranked_hits, relevance, params)
    budget = params.max_tokens if params.max_tokens is not None else MULTILEVEL_BUDGET
    counter = params.token_counter
    if not any(counter(hit.text) <= budget for ctx in chosen for hit in ctx.evidence):
        return []  # not one hit fits the ceiling: nothing to fetch
    keys = node_keys(chosen)
    values: list[Document | None] = []
    if keys:
        values = yield from ask(Fetch(keys))
    nodes = dict(zip(keys, values, strict=True))
    placed = _Placement(budget, params.count, [], [])
    for ctx in chosen:
        try:
            _visit(ctx, ctx.evidence, ctx.level, ctx.why, nodes, counter, placed)
        except MissingNodeError:
            if on_missing == "raise":
                raise
    docs: list[tuple[tuple[int, int], Document]] = []
    for ctx, node, ev, why in placed.wholes:
        doc = nodes[node[0]]
        assert doc is not None
        docs.append(((ctx.number, node[1]), _whole(ctx, node, ev, why, doc, counter)))
    sources: dict[str, Leaves] = {}
    for ctx, node, ev, held in placed.cuts:
        placed.left += held
        if placed.count is not None and len(docs) >= placed.count:
            break
        first = ev[0]
        leaves = sources.setdefault(
            first.source_key, Leaves(first.source_key, first.level, first.n_splits)
        )
        found = yield from cut(ev, Bounds(start=node[1], end=node[2]), placed.left, counter, leaves)
        if found is None:
            continue
        placed.left -= found.tokens
        base = nodes[node[0]]
        cut_from = {"level": level_of(node[0]), "key": node[0], "start": node[1], "end": node[2]}
        doc = cut_document(found, ctx.group, "multilevel", base.metadata if base else {}, cut_from)
        doc.metadata["context"] = ctx.number
        docs.append(((ctx.number, found.start), doc))
    return [doc for _, doc in sorted(docs, key=lambda pair: pair[0])]


def _visit(
    ctx: Context,
    ev: list[Hit],
    level: int,
    why: str,
    nodes: Mapping[str, Document | None],
    counter: TokenCounter,
    placed: _Placement,
) -> None:
    """Place ``ev`` under its node at ``level``: whole if it fits, else split, else cut later."""
    if placed.full:
        return
    node = ev[0].ancestors[level]
    doc = nodes.get(node[0])
    if doc is None:
        msg = f"Node {node[0]!r} is in the child index's ancestry but not in the store."
        raise MissingNodeError(msg)
    tokens = counter(doc.page_content)
    if tokens <= placed.left:
        placed.left -= tokens
        placed.wholes.append((ctx, node, ev, why))
        return
    if level == 0:
        held = counter(ev[0].text)
        held = held if held <= placed.left else 0
        placed.left -= held
        placed.cuts.append((ctx, node, ev, held))
        return
    below: dict[str, list[Hit]] = {}
    for hit in ev:
        below.setdefault(hit.ancestors[level - 1][0], []).append(hit)
    for part in below.values():
        inner = common_level(part)
        _visit(
            ctx,
            part,
            inner,
            "single-parent" if inner == 0 else "spans-parents",
            nodes,
            counter,
            placed,
        )


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
