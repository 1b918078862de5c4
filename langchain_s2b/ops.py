"""The I/O requests that retrieval and ingestion yield, and their two runners.

Every operation of the retriever is a generator of these requests; ``run``
carries one out synchronously and ``arun`` asynchronously. This file is the
only place where the sync and async paths differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.search import Searcher


@dataclass(frozen=True)
class Embed:
    """Embed the query."""

    query: str


@dataclass(frozen=True)
class Search:
    """The ``fetch`` nearest children: answers ``(hits, exhausted)``."""

    vector: list[float] | None
    query: str
    fetch: int
    filter: Any


@dataclass(frozen=True)
class Fetch:
    """One batched ``mget`` of node keys."""

    keys: list[str]


@dataclass(frozen=True)
class Put:
    """One batched ``mset`` of nodes."""

    pairs: Sequence[tuple[str, Document]]


@dataclass(frozen=True)
class Remove:
    """One batched ``mdelete`` of node keys."""

    keys: list[str]


@dataclass(frozen=True)
class AddLeaves:
    """Embed and index leaves under their keys."""

    leaves: list[Document]


@dataclass(frozen=True)
class RemoveLeaves:
    """Delete leaves from the child index."""

    keys: list[str]


Request = Embed | Search | Fetch | Put | Remove | AddLeaves | RemoveLeaves


def run(request: Request, searcher: Searcher, store: BaseStore[str, Document]) -> Any:
    """Carry out one request synchronously."""
    if isinstance(request, Embed):
        return searcher.embed_query(request.query)
    if isinstance(request, Search):
        return searcher.search(request.vector, request.query, request.fetch, request.filter)
    if isinstance(request, Fetch):
        return store.mget(request.keys)
    if isinstance(request, Put):
        return store.mset(request.pairs)
    if isinstance(request, Remove):
        return store.mdelete(request.keys)
    if isinstance(request, AddLeaves):
        return searcher.add(request.leaves)
    return searcher.delete(request.keys)


async def arun(request: Request, searcher: Searcher, store: BaseStore[str, Document]) -> Any:
    """Carry out one request asynchronously."""
    if isinstance(request, Embed):
        return await searcher.aembed_query(request.query)
    if isinstance(request, Search):
        return await searcher.asearch(request.vector, request.query, request.fetch, request.filter)
    if isinstance(request, Fetch):
        return await store.amget(request.keys)
    if isinstance(request, Put):
        return await store.amset(request.pairs)
    if isinstance(request, Remove):
        return await store.amdelete(request.keys)
    if isinstance(request, AddLeaves):
        return await searcher.aadd(request.leaves)
    return await searcher.adelete(request.keys)
