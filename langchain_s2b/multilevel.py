"""Pure: multilevel escalation (filled in by the multilevel mode)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.documents import Document

from langchain_s2b.params import QueryParams
from langchain_s2b.resolve import Group, Hit


def group(hits: Sequence[Hit], params: QueryParams) -> list[Group]:
    """Not yet implemented."""
    raise NotImplementedError


def select(groups: list[Group], params: QueryParams) -> list[Group]:
    """Not yet implemented."""
    raise NotImplementedError


def build(group: Group, fetched: Mapping[str, Document | None]) -> list[Document]:
    """Not yet implemented."""
    raise NotImplementedError
