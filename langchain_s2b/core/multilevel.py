"""Multilevel mode: escalation sentence -> paragraph -> section -> document.

Per source document, the *evidence* is the hits whose score is within
``margin`` of that document's best hit (a weak stray hit does not count) and
that rank among the query's ``fetch_k`` best hits (children fetched deeper,
only to find ``k`` documents, do not count).
The context is the lowest common ancestor of the evidence: their paragraph
when they share one (``single-parent``), else the section or document that
covers them (``spans-parents``). With ``merge_threshold`` set, the ratio rule
of LlamaIndex/Haystack also applies: when more than that share of a node's
children hold evidence, the node is taken (``ratio``).

Told a budget (``max_tokens``), or when these contexts together would exceed
:data:`~langchain_s2b.core.budget.MULTILEVEL_BUDGET`, the mode spends the
budget instead (:mod:`~langchain_s2b.core.budgeted`): the same evidence rule
seeds it, and context grows around the hits up the whole ladder, paragraph,
section, document, while it is worth more than the weakest hit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, MissingNodeError, dedupe_hits, rank, result_metadata
from langchain_s2b.core.keys import level_of
from langchain_s2b.core.merge import Chunk, merge_chunks
from langchain_s2b.core.params import QueryParams

Span = tuple[str, int, int]


def group(hits: Sequence[Hit], params: QueryParams) -> list[Group]:
    """One candidate context per source document, best document first."""
    by_source: dict[str, Group] = {}
    for hit in dedupe_hits(hits):
        if not hit.ancestors:
            msg = f"Child {hit.key!r} has no ancestors metadata; re-index it."
            raise ValueError(msg)
        if hit.source_key not in by_source:
            by_source[hit.source_key] = Group(
                hit.source_key, hit.source_id, [], [], hit.level, -1, -1
            )
        by_source[hit.source_key].hits.append(hit)
    return rank(list(by_source.values()))


def evidence(hits: Sequence[Hit], margin: float, floor: float = float("-inf")) -> list[Hit]:
    """Hits within ``margin`` of the best one and not below ``floor``, best first.

    The best hit always counts, whatever the floor.
    """
    best = max(hit.score for hit in hits)
    cut = max(best - margin, min(floor, best))
    return sorted((h for h in hits if h.score >= cut), key=lambda h: -h.score)


def top_floor(groups: Sequence[Group], top: int) -> float:
    """The score of the query's ``top``-th best hit.

    Deeper hits, fetched only to find more documents, are not evidence.
    """
    scores = sorted((h.score for g in groups for h in g.hits), reverse=True)
    return scores[min(top, len(scores)) - 1] if scores else float("-inf")


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


def select(groups: list[Group], params: QueryParams) -> list[Group]:
    """Escalate the evidence of each of the ``k`` best documents to its common node."""
    floor = top_floor(groups, params.fetch_k)
    chosen: list[Group] = []
    for rank_no, doc_group in enumerate(groups[: params.k]):
        ev = evidence(doc_group.hits, params.margin, floor)
        level = common_level(ev)
        why = "single-parent" if level == 0 else "spans-parents"
        if params.merge_threshold is not None:
            by_ratio = ratio_level(ev, params.merge_threshold)
            if by_ratio > level:
                level, why = by_ratio, "ratio"
        spans = list(dict.fromkeys(h.ancestors[level][:3] for h in ev if len(h.ancestors) > level))
        for part in _runs(ev[0], spans, why):
            inside = [h for h in ev if part.start <= h.start and h.end <= part.end]
            part.hits = inside or part.hits
            part.extra["context"] = rank_no
            chosen.append(part)
    return chosen


def _runs(best: Hit, spans: list[Span], label: str) -> list[Group]:
    """Contiguous runs of spans (adjacent nodes join), one group per run."""
    groups: list[Group] = []
    for key, start, end in sorted(spans, key=lambda s: s[1]):
        last = groups[-1] if groups else None
        if last is not None and start <= last.end:
            last.keys.append(key)
            last.end = max(last.end, end)
            continue
        level = level_of(key)
        groups.append(
            Group(best.source_key, best.source_id, [key], [best], level, start, end, label)
        )
    return groups


def build(group: Group, fetched: Mapping[str, Document | None]) -> list[Document]:
    """Fetch-side assembly: merge the run's nodes."""
    docs = [fetched.get(key) for key in group.keys]
    if any(doc is None for doc in docs):
        missing = [key for key, doc in zip(group.keys, docs, strict=False) if doc is None]
        msg = f"Nodes {missing} are in the child index's ancestry but not in the store."
        raise MissingNodeError(msg)
    present = [doc for doc in docs if doc is not None]
    merged = merge_chunks(
        [Chunk(group.start, group.end, "")]
        if not present
        else [
            Chunk(int(d.metadata["start"]), int(d.metadata["end"]), d.page_content) for d in present
        ]
    )
    meta = result_metadata(group, "multilevel", present[0].metadata)
    meta.update(start=merged.start, end=merged.end, context=group.extra["context"])
    if len(group.keys) > 1:
        meta["keys"] = list(group.keys)
    return [Document(page_content=merged.text, metadata=meta, id=group.keys[0])]
