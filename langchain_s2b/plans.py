"""Pure: one plan per mode (group hits, choose results, assemble them).

The retriever looks its mode up in :data:`PLANS` once per call; no method
branches on the mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

from langchain_s2b import multilevel
from langchain_s2b.budget import fit_budget
from langchain_s2b.params import QueryParams
from langchain_s2b.resolve import (
    Group,
    Hit,
    MissingNodeError,
    assemble_parent,
    assemble_windows,
    coalesce_windows,
    plan_parents,
    plan_windows,
)

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
    finish: Callable[[list[Document], QueryParams], list[Document]] = lambda docs, p: docs
    """Runs over all built documents (window mode: merge windows that share text)."""

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
        docs = self.finish(docs, params)
        if self.cap_at_k:
            docs = docs[: params.k]
        return fit_budget(docs, params.max_tokens) if params.max_tokens else docs


RESOLUTION_EVENT = "langchain_s2b.resolution"
"""Name of the custom callback event every retrieval run emits (see :func:`summary`)."""
_SUMMARY_FIELDS = ("mode", "level", "escalation", "score", "source_id", "start", "end")


def summary(docs: Sequence[Document]) -> dict[str, Any]:
    """What a run resolved to, for tracers: one entry per returned document."""
    results = []
    for doc in docs:
        entry = {name: doc.metadata.get(name) for name in _SUMMARY_FIELDS}
        entry["matches"] = [
            {k: m[k] for k in ("score", "start", "end")} for m in doc.metadata.get("matches", [])
        ]
        results.append(entry)
    return {"results": results}


def _first_k(groups: list[Group], params: QueryParams) -> list[Group]:
    return groups[: params.k]


PLANS: dict[str, Plan] = {
    "parent": Plan(
        group=lambda hits, p: plan_parents(hits),
        select=_first_k,
        build=lambda group, fetched: [assemble_parent(group, fetched)],
    ),
    "window": Plan(
        group=lambda hits, p: plan_windows(hits, p.before, p.after, coalesce=p.coalesce, limit=p.k),
        select=_first_k,
        build=assemble_windows,
        finish=lambda docs, p: coalesce_windows(docs) if p.coalesce else docs,
    ),
    "multilevel": Plan(
        group=multilevel.group,
        select=multilevel.select,
        build=multilevel.build,
        cap_at_k=False,
    ),
}
