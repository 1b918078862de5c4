"""Many operations in lock-step: the requests they wait on, carried out together.

``SmallToBigRetriever.batch`` runs, for every query, the very operation that
``invoke`` runs. :func:`lockstep` gathers the requests the queries are waiting
on and yields those of one kind as one request: every :class:`EmbedQuery` as
one :class:`EmbedQueries`, every :class:`Search` of one size and filter as one
:class:`SearchMany` (one FAISS matrix search), every :class:`Fetch` (and every
:class:`ReadLeaves`) as one ``mget`` of the union of their keys, every
:class:`ReadSpans` (and every :class:`ReadRuns`) as one read of all their runs. Each query
then resumes with its own answer, so its results are the ones ``invoke``
returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate, pairwise
from typing import Any

from langchain_s2b.core.requests import (
    EmbedQueries,
    EmbedQuery,
    Fetch,
    Op,
    ReadHits,
    ReadLeaves,
    ReadRuns,
    ReadSpans,
    Request,
    Search,
    SearchMany,
)

Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)`` for one operation."""
Split = Callable[[Any], list[Any]]
"""Turns a combined request's answer into one answer per member."""


def _kind(request: Request[Any], position: int) -> tuple[Any, ...]:
    """Requests of one kind are carried out together."""
    if isinstance(request, EmbedQuery):
        return ("embed",)
    if isinstance(request, Search):
        return ("search", request.fetch, id(request.filter))
    if isinstance(request, Fetch):
        return ("fetch",)
    if isinstance(request, ReadLeaves):
        return ("fetch", "leaves")
    if isinstance(request, ReadSpans):
        return ("fetch", "spans")
    if isinstance(request, ReadRuns):
        return ("fetch", "runs")
    if isinstance(request, ReadHits):
        return ("read",)
    return ("one", position)


def combine(requests: list[Request[Any]]) -> tuple[Request[Any], Split]:
    """One request that answers all ``requests`` (of one kind), and how to split its answer."""
    first = requests[0]
    if isinstance(first, EmbedQuery):
        queries = [r.query for r in requests if isinstance(r, EmbedQuery)]
        return EmbedQueries(queries), list
    if isinstance(first, Search):
        searches = [r for r in requests if isinstance(r, Search)]
        vectors, queries = [r.vector for r in searches], [r.query for r in searches]
        return SearchMany(vectors, queries, first.fetch, first.filter), list
    if isinstance(first, Fetch):
        fetches = [r for r in requests if isinstance(r, Fetch)]
        keys = list(dict.fromkeys(k for r in fetches for k in r.keys))

        def split(values: Any) -> list[Any]:
            found = dict(zip(keys, values, strict=True))
            return [[found[k] for k in r.keys] for r in fetches]

        return Fetch(keys), split
    if isinstance(first, ReadLeaves):
        leaf_reads = [r for r in requests if isinstance(r, ReadLeaves)]
        leaf_keys = list(dict.fromkeys(k for r in leaf_reads for k in r.keys))
        whole = frozenset().union(*(r.whole for r in leaf_reads))

        def split_leaves(values: Any) -> list[Any]:
            found = dict(zip(leaf_keys, values, strict=True))
            return [[found[k] for k in r.keys] for r in leaf_reads]

        return ReadLeaves(leaf_keys, whole), split_leaves
    if isinstance(first, ReadSpans):
        span_reads = [r for r in requests if isinstance(r, ReadSpans)]
        spans = [s for r in span_reads for s in r.spans]
        return ReadSpans(spans), _by_count([len(r.spans) for r in span_reads])
    if isinstance(first, ReadRuns):
        run_reads = [r for r in requests if isinstance(r, ReadRuns)]
        runs = [run for r in run_reads for run in r.runs]
        return ReadRuns(runs), _by_count([len(r.runs) for r in run_reads])
    if isinstance(first, ReadHits):
        reads = [r for r in requests if isinstance(r, ReadHits)]
        wanted = list(dict.fromkeys(k for r in reads for k in r.keys))

        def split_read(got: Any) -> list[Any]:
            return [{k: got[k] for k in r.keys if k in got} for r in reads]

        return ReadHits(wanted), split_read
    if len(requests) != 1:
        msg = f"Requests of kind {type(first).__name__} are not combined; got {len(requests)}."
        raise ValueError(msg)
    return first, lambda answer: [answer]


def _by_count(counts: list[int]) -> Split:
    """Split an answer of one item per member's item into ``counts`` consecutive parts."""

    def split(values: Any) -> list[Any]:
        starts = [0, *accumulate(counts)]
        return [values[a:b] for a, b in pairwise(starts)]

    return split


def lockstep(ops: Sequence[Op[Any]]) -> Op[list[Outcome]]:
    """Advance many operations together; yield one combined request at a time.

    A request that fails (the driver throws its exception in) fails the
    operations that waited on it; an operation that raises fails alone.
    Fetches wait until no operation is still embedding or searching, so the
    whole batch shares one ``mget``.
    """
    outcomes: list[Outcome | None] = [None] * len(ops)
    pending: dict[int, Request[Any]] = {}

    def advance(i: int, value: Any, *, first: bool = False) -> None:
        try:
            pending[i] = next(ops[i]) if first else ops[i].send(value)
        except StopIteration as stop:
            outcomes[i] = (True, stop.value)
        except Exception as err:  # reported per query, as invoke would raise it
            outcomes[i] = (False, err)

    for i in range(len(ops)):
        advance(i, None, first=True)
    while pending:
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, request in pending.items():
            groups.setdefault(_kind(request, i), []).append(i)
        searching = [members for kind, members in groups.items() if kind[0] != "fetch"]
        for members in searching or list(groups.values()):
            request, split = combine([pending.pop(i) for i in members])
            try:
                answers = split((yield request))
            except Exception as err:  # fails the operations of this request
                for i in members:
                    ops[i].close()
                    outcomes[i] = (False, err)
                continue
            for n, i in enumerate(members):
                advance(i, answers[n])
    return [outcome if outcome is not None else (False, RuntimeError()) for outcome in outcomes]
