"""Parent mode: hits grouped by their parent node, and the parent as the result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, MissingNodeError, result_metadata
from langchain_s2b.core.keys import level_of
from langchain_s2b.core.requests import LeafRead, read_whole


def plan_parents(hits: Sequence[Hit], parent_level: str | None = None) -> list[Group]:
    """Group hits (distinct, rank order) by parent, or by their ancestor at ``parent_level``.

    A parent ranks by its best-ranked hit.
    """
    groups: dict[str, Group] = {}
    for hit in hits:
        if hit.parent_key is None or not hit.ancestors:
            msg = f"Child {hit.key!r} has no parent_id/ancestors metadata."
            raise ValueError(msg)
        key, start, end, _ = hit.ancestors[parent_index(hit, parent_level)]
        if key not in groups:
            level = level_of(key)
            groups[key] = Group(hit.source_key, hit.source_id, [key], [], level, start, end)
        elif hit.score <= 0:  # a child that shares nothing with the query is no match
            continue
        groups[key].hits.append(hit)
    return list(groups.values())


def parent_index(hit: Hit, parent_level: str | None) -> int:
    """Index into ``hit.ancestors`` of its parent: the nearest, or the one at ``parent_level``."""
    if parent_level is None:
        return 0
    for i, ancestor in enumerate(hit.ancestors):
        if level_of(ancestor[0]) == parent_level:
            return i
    levels = [level_of(a[0]) for a in hit.ancestors]
    msg = f"parent_level {parent_level!r} is not a level above {hit.key!r}; its levels: {levels}."
    raise ValueError(msg)


def assemble_parent(group: Group, fetched: Mapping[str, LeafRead | None]) -> Document:
    """The parent document of a parent group, with score and matches."""
    found = fetched.get(group.keys[0])
    if found is None:
        msg = (
            f"Parent {group.keys[0]!r} is in the child index but not in the parent store; "
            "run retriever.verify(repair=True) or pass on_missing='skip'."
        )
        raise MissingNodeError(msg)
    parent = read_whole(found)
    meta = result_metadata(group, "parent", parent.metadata)
    return Document(page_content=parent.page_content, metadata=meta, id=group.keys[0])
