"""Retrieval as an operation: one ranking for every mode, one plan per mode, a ceiling over it.

:func:`retrieve` looks the mode up in :data:`PLANS` once per call; no method
branches on the mode. Every call ranks the same way
(:mod:`~langchain_s2b.core.ranking`), searching deeper until the mode has its
``k`` results (or, with ``k=None`` under a budget, until no deeper hit could
be evidence). The mode groups the hits into its results (parents, windows,
contexts); ``k`` of them are kept, or with ``k=None`` every one that holds
evidence. A budget is a ceiling over those results
(:mod:`~langchain_s2b.core.ceiling`): each whole when it fits, else cut
around its hits. Multilevel mode always has one
(:mod:`~langchain_s2b.core.multilevel`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core import multilevel, pack
from langchain_s2b.core.ceiling import RING, Bounds, Leaves, cut_document
from langchain_s2b.core.hits import Candidate, Group, MissingNodeError, Placed, all_read
from langchain_s2b.core.merge import SpanText
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.parent import assemble_parent, plan_parents
from langchain_s2b.core.place import (
    Fine,
    Run,
    Slot,
    as_cut,
    coarse,
    coverage,
    grow,
    leaves_of,
    pays,
    placed,
    read_around,
    read_into,
    returning,
    seed,
    seed_parents,
)
from langchain_s2b.core.ranking import (
    Ranked,
    first_depth,
    may_hold_evidence,
    ranked,
    read,
    read_at,
)
from langchain_s2b.core.relevance import evidence
from langchain_s2b.core.requests import (
    EmbedQuery,
    Fetch,
    LeafRead,
    Op,
    ReadLeaves,
    ReadSpans,
    Vector,
    ask,
    leaf_metadata,
    read_documents,
)
from langchain_s2b.core.window import (
    assemble_windows,
    first_present,
    place_windows,
    plan_windows,
    span_window,
    window_span,
)

logger = logging.getLogger("langchain_s2b")
Fetched = Mapping[str, LeafRead | None]


@dataclass(frozen=True)
class Plan:
    """How one mode turns ranked hits into results."""

    group: Callable[[Sequence[Candidate], QueryParams], list[Group]]
    """Hits -> candidate results, best first (counted against ``k``)."""
    resolve: Callable[[list[Group], Ranked, QueryParams, str], Op[list[Document]]]
    """Candidates -> the documents returned (fetches, assembly, the ceiling)."""
    place: Callable[[Sequence[Candidate], QueryParams], Placed] | None = None
    """Where ``group`` puts the hits, planned from keys and scores alone: only the hits it
    places are read, and its groups are built from that plan (``None``: every hit is read,
    then grouped)."""


def retrieve(query: str, params: QueryParams, on_missing: str) -> Op[list[Document]]:
    """The mode's results: ``k`` of them (or as many as fit), within the ceiling if any."""
    vector = yield from ask(EmbedQuery(query))
    return (yield from retrieve_vector(query, vector, params, on_missing))


def retrieve_vector(
    query: str, vector: Vector, params: QueryParams, on_missing: str
) -> Op[list[Document]]:
    """:func:`retrieve` for a query already embedded."""
    plan = PLANS[params.mode]
    first = depth = first_depth(params)
    while True:
        ranking = yield from ranked(query, vector, params, depth, params.fetch_k * depth // first)
        ranking, groups = yield from _placed(ranking, plan, params)
        if ranking.exhausted:
            break
        if params.count is not None:
            if len(groups) >= params.count:
                break
        elif not may_hold_evidence(ranking, params.margin):
            break
        depth *= 2
    docs = yield from plan.resolve(groups, ranking, params, on_missing)
    for name, scores in (("fused_score", ranking.fused), ("rerank_score", ranking.reranked)):
        if scores is not None:
            for doc in docs:
                _mark(doc, name, scores)
    return docs


def _placed(ranking: Ranked, plan: Plan, params: QueryParams) -> Op[tuple[Ranked, list[Group]]]:
    """The ranking with the hits its mode places read (issue 34: no other hit is), and its groups.

    A child gone since the search drops out of the ranking, which may place
    another hit: placed again until every hit placed is read.
    """
    if plan.place is None:
        ranking = yield from read(ranking)
        return ranking, plan.group(ranking.hits, params)
    while True:
        placed = plan.place(ranking.hits, params)
        done = yield from read_at(ranking, placed.positions)
        if len(done.hits) == len(ranking.hits):  # none gone: the same hits are placed
            return done, placed.groups(done.hits)
        ranking = done


def choose(groups: list[Group], ranking: Ranked, params: QueryParams) -> list[Group]:
    """The first ``k`` results, or with ``k=None`` every one that holds evidence."""
    if params.count is not None:
        return groups[: params.count]
    found = {hit.key for hit in evidence(ranking.hits, ranking.relevance, params.margin)}
    return [group for group in groups if any(hit.key in found for hit in group.hits)]


def shaped(
    build: Callable[[Group, Fetched], list[Document]],
    bounds: Callable[[Group], Bounds],
    mode: str,
) -> Callable[[list[Group], Ranked, QueryParams, str], Op[list[Document]]]:
    """A mode whose results are built from one fetch, then held to the ceiling."""

    def resolve(
        groups: list[Group], ranking: Ranked, params: QueryParams, on_missing: str
    ) -> Op[list[Document]]:
        chosen = choose(groups, ranking, params)
        if mode == "window" and not fits_any(chosen, params.max_tokens, params):
            return []  # not one hit fits the ceiling: nothing to fetch (parent mode cuts finer)
        spans: list[SpanText | None] = [None] * len(chosen)
        if mode == "window" and params.max_tokens is None and chosen:  # no ceiling: no leaf
            spans = yield from ask(ReadSpans([window_span(group) for group in chosen]))
        rest = [group for group, span in zip(chosen, spans, strict=True) if span is None]
        keys = list(dict.fromkeys(key for group in rest for key in group.keys))
        fetched: Fetched = {}
        if keys and mode == "window":
            fetched = yield from _read_windows(keys, rest)
        elif keys:
            fetched = dict(zip(keys, (yield from ask(Fetch(keys))), strict=True))
        built = _build_all(chosen, fetched, build, on_missing, spans)
        for _, docs in built:
            for doc in docs:
                doc.metadata["tokens"] = params.token_counter(doc.page_content)
        whole = [doc for _, docs in built for doc in docs]
        if (
            params.max_tokens is None
            or sum(d.metadata["tokens"] for d in whole) <= params.max_tokens
        ):
            return whole  # a ceiling the answer does not reach changes nothing
        return (yield from ceiling(built, fetched, ranking, bounds, mode, params))

    return resolve


def _read_windows(keys: list[str], groups: Sequence[Group]) -> Op[dict[str, LeafRead | None]]:
    """The windows' leaves (:class:`ReadLeaves`), each window's first one present read whole.

    Its metadata is the window's: a window's first leaf is asked for whole, and
    when it is missing the first one present is read whole after.
    """
    values = yield from ask(ReadLeaves(keys, frozenset(group.keys[0] for group in groups)))
    read = dict(zip(keys, values, strict=True))
    firsts = (first_present(group, read) for group in groups)
    yield from read_documents(read, [key for key in firsts if key is not None])
    return read


def fits_any(groups: Sequence[Group], budget: int | None, params: QueryParams) -> bool:
    """Whether any hit's own text fits ``budget`` (no ceiling: always).

    A result and any run cut from it hold a hit, so when none fits nothing can
    come back, and nothing is fetched.
    """
    counter = params.token_counter
    return budget is None or any(counter(h.text) <= budget for g in groups for h in g.hits)


def _build_all(
    groups: list[Group],
    fetched: Fetched,
    build: Callable[[Group, Fetched], list[Document]],
    on_missing: str,
    spans: Sequence[SpanText | None],
) -> list[tuple[Group, list[Document]]]:
    """Every chosen result built whole; the missing-node policy applied.

    A window read as one slice (``spans``) is built from it; the others from
    ``fetched``.
    """
    out = []
    skipped = 0
    for group, span in zip(groups, spans, strict=True):
        if span is not None:
            out.append((group, [span_window(group, span)]))
            continue
        try:
            out.append((group, build(group, fetched)))
        except MissingNodeError:
            if on_missing == "raise":
                raise
            skipped += 1
    if skipped:
        logger.warning("Skipped %d result(s) whose nodes are missing from the store.", skipped)
    return out


def ceiling(
    built: list[tuple[Group, list[Document]]],
    fetched: Fetched,
    ranking: Ranked,
    bounds: Callable[[Group], Bounds],
    mode: str,
    params: QueryParams,
) -> Op[list[Document]]:
    """A reached ceiling (:mod:`~langchain_s2b.core.place`): evidence, whole parents, context.

    Every result's evidence hits get their own leaves first, in rank order; a
    parent then comes back whole when it fits and pays; every other result
    grows around its hits by worth, inside its parent or window, and a run
    that grew to its whole window or parent is that result whole. Parent mode
    cuts finely: inside a parent, at sentence boundaries within its leaves
    (:func:`~langchain_s2b.core.place.sentence_slot`).
    """
    counter = params.token_counter
    budget = params.max_tokens or 0
    found = {hit.key for hit in evidence(ranking.hits, ranking.relevance, params.margin)}
    ranks = {hit.key: rank for rank, hit in enumerate(ranking.hits)}
    built = [(group, docs) for group, docs in built if docs]
    slots = [
        Slot(
            group.source_key,
            group.hits[0].level,
            group.hits[0].n_splits,
            bounds(group),
            [h for h in group.hits if h.key in found] or group.hits[:1],
        )
        for group, _ in built
    ]
    sources: dict[str, Leaves] = {}
    for slot in slots:
        leaves_of(slot, sources)
    read_into(sources, fetched)  # a window's leaves: fetched already
    reach = max(params.before, params.after, 1)
    yield from read_around(slots, sources, PARENT_READ if mode == "parent" else max(RING, reach))
    if mode == "parent":  # every evidence hit: its chunk, or its sentence (fine cuts)
        back = {h.key for slot in slots for h in slot.hits}
    else:
        back = yield from returning(
            slots, ranks, ranking.relevance, budget, params.count, counter, sources
        )
    ranked_hits = sorted(
        ((ranks[h.key], i, h) for i, slot in enumerate(slots) for h in slot.hits if h.key in back),
        key=lambda entry: entry[:2],
    )
    order = [(i, h) for _, i, h in ranked_hits]
    fines: list[tuple[int, Fine]] = []
    if mode != "parent":
        left = seed(slots, order, budget, params.count, counter, sources)
    else:
        left = seed_parents(
            slots, order, ranking.query, budget, params.count, counter, sources, fines
        )
        for index, ((group, docs), slot) in enumerate(zip(built, slots, strict=True)):
            parts = [slot, *(f.slot for i, f in fines if i == index)]
            extra = sum(d.metadata["tokens"] for d in docs) - sum(p.tokens for p in parts)
            cover = coverage(placed([slot]), group.start, group.end, reach, sources)
            if any(p.runs for p in parts) and pays(cover, extra, left, budget):
                for part in parts:
                    part.whole = True
                left -= extra
    yield from grow([*slots, *(f.slot for _, f in fines)], ranks, left, counter, sources)
    out: list[Document] = []
    for index, ((group, docs), slot) in enumerate(zip(built, slots, strict=True)):
        mine = [f for i, f in fines if i == index]
        runs = len(slot.runs) + sum(len(f.slot.runs) for f in mine)
        if slot.whole or (runs == 1 and bool(slot.runs) and _is_whole(slot.runs[0], docs, mode)):
            out += docs
            continue
        cuts = [as_cut(run, slot) for run in slot.runs]
        cuts += [coarse(as_cut(run, f.slot), f) for f in mine for run in f.slot.runs]
        cuts.sort(key=lambda found: min(ranks[h.key] for h in found.hits))
        first = next(d for d in (fetched.get(k) for k in group.keys) if d is not None)
        base = leaf_metadata(first)
        out += [cut_document(found, group, mode, base, _cut_from(docs)) for found in cuts]
    return out


PARENT_READ = 64
"""Leaves read on each side of a hit in parent mode: every leaf of its parent, as a rule."""


def _is_whole(run: Run, docs: list[Document], mode: str) -> bool:
    """Whether a run grew to its whole result (a window's splits, a parent's span)."""
    if len(docs) != 1:
        return False
    meta = docs[0].metadata
    if mode == "window":
        return [run.first, run.last] == [meta["split_ids"][0], meta["split_ids"][-1]]
    return (run.chunk.start, run.chunk.end) == (meta["start"], meta["end"])


def _cut_from(docs: list[Document]) -> dict[str, object]:
    """What a cut run was cut from: the whole result's level, key (a node's) and span."""
    meta = docs[0].metadata
    whole: dict[str, object] = {"level": meta["level"]}
    if docs[0].id is not None:
        whole["key"] = docs[0].id
    whole.update(
        start=min(d.metadata["start"] for d in docs), end=max(d.metadata["end"] for d in docs)
    )
    return whole


def _mark(doc: Document, name: str, scores: Mapping[str, float]) -> None:
    """Put a rank score (``fused_score``, ``rerank_score``) on a result (its best) and matches."""
    matches = doc.metadata.get("matches", [])
    for match in matches:
        match[name] = scores[match["key"]]
    if matches:
        doc.metadata[name] = max(match[name] for match in matches)


def _window_bounds(group: Group) -> Bounds:
    return Bounds(lo=group.extra["lo"], hi=group.extra["hi"])


def _parent_bounds(group: Group) -> Bounds:
    return Bounds(start=group.start, end=group.end)


def _multilevel(
    groups: list[Group], ranking: Ranked, params: QueryParams, on_missing: str
) -> Op[list[Document]]:
    return (yield from multilevel.resolve(groups, ranking, params, on_missing))


PLANS: dict[str, Plan] = {
    "parent": Plan(
        group=lambda hits, p: plan_parents(all_read(hits), p.parent_level),
        resolve=shaped(
            lambda group, fetched: [assemble_parent(group, fetched)], _parent_bounds, "parent"
        ),
    ),
    "window": Plan(
        group=lambda hits, p: plan_windows(
            hits, p.before, p.after, coalesce=p.coalesce, limit=p.count
        ),
        resolve=shaped(assemble_windows, _window_bounds, "window"),
        place=lambda hits, p: place_windows(
            hits, p.before, p.after, coalesce=p.coalesce, limit=p.count
        ),
    ),
    "multilevel": Plan(group=multilevel.group, resolve=_multilevel),
    "pack": Plan(group=pack.one_per_hit, resolve=pack.pack),
}
