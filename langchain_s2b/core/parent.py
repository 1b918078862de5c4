"""Parent mode: hits grouped by their parent node, and the parent as the result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, MissingNodeError, dedupe_hits, rank, result_metadata
from langchain_s2b.core.keys import level_of


def plan_parents(hits: Sequence[Hit]) -> list[Group]:
    """Group hits by their parent node, best parent first."""
    groups: dict[str, Group] = {}
    for hit in dedupe_hits(hits):
        if hit.parent_key is None or not hit.ancestors:
            msg = f"Child {hit.key!r} has no parent_id/ancestors metadata."
            raise ValueError(msg)
        key, start, end, _ = hit.ancestors[0]
        if key not in groups:
            level = level_of(key)
            groups[key] = Group(hit.source_key, hit.source_id, [key], [], level, start, end)
        groups[key].hits.append(hit)
    return rank(list(groups.values()))


def assemble_parent(group: Group, fetched: Mapping[str, Document | None]) -> Document:
    """The parent document of a parent group, with score and matches."""
    parent = fetched.get(group.keys[0])
    if parent is None:
        msg = (
            f"Parent {group.keys[0]!r} is in the child index but not in the parent store; "
            "run retriever.verify(repair=True) or pass on_missing='skip'."
        )
        raise MissingNodeError(msg)
    meta = result_metadata(group, "parent", parent.metadata)
    return Document(page_content=parent.page_content, metadata=meta, id=group.keys[0])
