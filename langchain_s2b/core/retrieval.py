"""Retrieval as an operation: one plan per mode (group, choose, assemble) and the search loop.

:func:`retrieve` looks the mode up in :data:`PLANS` once per call; no method
branches on the mode. Told a budget (``max_tokens``), every mode spends it
through :func:`~langchain_s2b.core.budgeted.retrieve_within` instead: the
evidence and the budget, not ``k``, decide how much comes back. Multilevel
mode without a budget whose ``k`` contexts would exceed
:data:`~langchain_s2b.core.budget.MULTILEVEL_BUDGET` spends that budget and
returns its ``k`` best runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core import multilevel
from langchain_s2b.core.budget import MULTILEVEL_BUDGET
from langchain_s2b.core.budgeted import retrieve_within
from langchain_s2b.core.hits import Group, Hit, MissingNodeError
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.parent import assemble_parent, plan_parents
from langchain_s2b.core.requests import EmbedQuery, Fetch, Op, Search, Vector, ask
from langchain_s2b.core.window import assemble_windows, plan_windows

logger = logging.getLogger("langchain_s2b")
Fetched = Mapping[str, Document | None]


@dataclass(frozen=True)
class Plan:
    """How one mode turns hits into results."""

    group: Callable[[Sequence[Hit], QueryParams], list[Group]]
    """Hits -> candidate results, best first (counted against ``k``)."""
    select: Callable[[list[Group], QueryParams], list[Group]]
    """Candidates -> the results to fetch."""
    build: Callable[[Group, Fetched], list[Document]]
    """One chosen result + fetched nodes -> documents."""
    cap_at_k: bool = True
    """Cut the documents at ``k`` (multilevel counts contexts, not documents)."""

    def assemble(
        self, groups: list[Group], fetched: Fetched, params: QueryParams, on_missing: str
    ) -> list[Document]:
        """Build every chosen result; apply the missing-node policy and the budget."""
        docs: list[Document] = []
        skipped = 0
        for group in groups:
            try:
                docs.extend(self.build(group, fetched))
            except MissingNodeError:
                if on_missing == "raise":
                    raise
                skipped += 1
        if skipped:
            logger.warning("Skipped %d result(s) whose nodes are missing from the store.", skipped)
        return docs[: params.k] if self.cap_at_k else docs


def _first_k(groups: list[Group], params: QueryParams) -> list[Group]:
    return groups[: params.k]


PLANS: dict[str, Plan] = {
    "parent": Plan(
        group=lambda hits, p: plan_parents(hits, p.parent_level),
        select=_first_k,
        build=lambda group, fetched: [assemble_parent(group, fetched)],
    ),
    "window": Plan(
        group=lambda hits, p: plan_windows(hits, p.before, p.after, coalesce=p.coalesce, limit=p.k),
        select=_first_k,
        build=assemble_windows,
    ),
    "multilevel": Plan(
        group=multilevel.group,
        select=multilevel.select,
        build=multilevel.build,
        cap_at_k=False,
    ),
}


def retrieve(query: str, params: QueryParams, on_missing: str) -> Op[list[Document]]:
    """The mode's ``k`` results, or, told a budget, the budget filled."""
    if params.max_tokens is not None:
        return (yield from retrieve_within(query, params, params.max_tokens, on_missing))
    vector = yield from ask(EmbedQuery(query))
    docs = yield from retrieve_k(query, params, on_missing, vector)
    if params.mode == "multilevel":
        tokens = sum(params.token_counter(doc.page_content) for doc in docs)
        if tokens > MULTILEVEL_BUDGET:  # k contexts asked for: the best k runs of the budget
            filled = yield from retrieve_within(
                query, params, MULTILEVEL_BUDGET, on_missing, vector
            )
            return filled[: params.k]
    return docs


def retrieve_k(
    query: str, params: QueryParams, on_missing: str, vector: Vector
) -> Op[list[Document]]:
    """Search, doubling ``fetch`` until ``k`` results exist; then one batched fetch."""
    plan = PLANS[params.mode]
    fetch = max(params.fetch_k, params.k)
    while True:
        found = yield from ask(Search(vector, query, fetch, params.filter))
        groups = plan.group(found.hits, params)
        if len(groups) >= params.k or found.exhausted:
            break
        fetch *= 2
    chosen = plan.select(groups, params)
    keys = list(dict.fromkeys(key for group in chosen for key in group.keys))
    values = yield from ask(Fetch(keys))
    fetched = dict(zip(keys, values, strict=False))
    return plan.assemble(chosen, fetched, params, on_missing)
