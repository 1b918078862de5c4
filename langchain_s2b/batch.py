"""Many queries at once: one embedding call, one search per round, one fetch.

``SmallToBigRetriever.batch`` runs, for every query, the very generator that
``invoke`` runs, in lock-step: :func:`lockstep` gathers the requests the
queries are waiting on, and the pending requests of one kind are carried out
together (:func:`run_many` / :func:`arun_many`): every ``Embed`` in one
``embed_queries`` call, every ``Search`` of one size as one FAISS matrix
search, every ``Fetch`` as one ``mget`` of the union of their keys. Each query
then resumes with its own answer, so its results are the ones ``invoke``
returns. Callbacks still start and end one run per query (:func:`start_runs`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.stores import BaseStore

from langchain_s2b import ops
from langchain_s2b.ops import Embed, Fetch, Search
from langchain_s2b.plans import RESOLUTION_EVENT, summary
from langchain_s2b.search import Searcher

Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)`` for one query."""
Answers = list[Any] | BaseException


def _kind(request: ops.Request, position: int) -> tuple[Any, ...]:
    """Requests with the same kind can be carried out together."""
    if isinstance(request, Embed):
        return ("embed",)
    if isinstance(request, Search):
        return ("search", request.fetch, id(request.filter))
    if isinstance(request, Fetch):
        return ("fetch",)
    return ("one", position)


def lockstep(
    gens: Sequence[Generator[ops.Request, Any, Any]],
) -> Generator[list[ops.Request], Answers, list[Outcome]]:
    """Advance many request generators together; yield one same-kind batch at a time.

    The driver answers a batch with one answer per request, or with an exception
    that fails every query of the batch. A query that raises fails alone.
    Fetches wait until no query is still embedding or searching.
    """
    outcomes: list[Outcome | None] = [None] * len(gens)
    pending: dict[int, ops.Request] = {}

    def advance(i: int, value: Any, *, first: bool = False) -> None:
        try:
            pending[i] = next(gens[i]) if first else gens[i].send(value)
        except StopIteration as stop:
            outcomes[i] = (True, stop.value)
        except Exception as err:  # reported per query, as invoke would raise it
            outcomes[i] = (False, err)

    for i in range(len(gens)):
        advance(i, None, first=True)
    while pending:
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, request in pending.items():
            groups.setdefault(_kind(request, i), []).append(i)
        # A query's fetch is its last request: hold fetches back while any query is
        # still searching, so the whole batch shares one mget.
        searching = [members for kind, members in groups.items() if kind[0] != "fetch"]
        for members in searching or list(groups.values()):
            answers = yield [pending.pop(i) for i in members]
            for n, i in enumerate(members):
                if isinstance(answers, BaseException):
                    gens[i].close()
                    outcomes[i] = (False, answers)
                else:
                    advance(i, answers[n])
    return [outcome if outcome is not None else (False, RuntimeError()) for outcome in outcomes]


def run_many(
    requests: list[ops.Request], searcher: Searcher, store: BaseStore[str, Document]
) -> Answers:
    """Carry out one same-kind batch synchronously."""
    try:
        first = requests[0]
        if isinstance(first, Embed):
            return searcher.embed_queries([r.query for r in requests])  # type: ignore[union-attr]
        if isinstance(first, Search):
            vectors, queries = _search_args(requests)
            return searcher.search_many(vectors, queries, first.fetch, first.filter)
        if isinstance(first, Fetch):
            keys = _union(requests)
            return _split(requests, dict(zip(keys, store.mget(keys), strict=True)))
        return [ops.run(r, searcher, store) for r in requests]
    except Exception as err:  # fails the queries of this batch
        return err


async def arun_many(
    requests: list[ops.Request], searcher: Searcher, store: BaseStore[str, Document]
) -> Answers:
    """Carry out one same-kind batch asynchronously."""
    try:
        first = requests[0]
        if isinstance(first, Embed):
            return await searcher.aembed_queries([r.query for r in requests])  # type: ignore[union-attr]
        if isinstance(first, Search):
            vectors, queries = _search_args(requests)
            return await searcher.asearch_many(vectors, queries, first.fetch, first.filter)
        if isinstance(first, Fetch):
            keys = _union(requests)
            return _split(requests, dict(zip(keys, await store.amget(keys), strict=True)))
        return [await ops.arun(r, searcher, store) for r in requests]
    except Exception as err:  # fails the queries of this batch
        return err


def _search_args(requests: list[ops.Request]) -> tuple[list[list[float] | None], list[str]]:
    searches = [r for r in requests if isinstance(r, Search)]
    return [r.vector for r in searches], [r.query for r in searches]


def _union(requests: list[ops.Request]) -> list[str]:
    return list(dict.fromkeys(k for r in requests if isinstance(r, Fetch) for k in r.keys))


def _split(requests: list[ops.Request], values: dict[str, Any]) -> list[Any]:
    return [[values[k] for k in r.keys] for r in requests if isinstance(r, Fetch)]


# Callbacks: one retriever run per query, as BaseRetriever.invoke starts them ------


def _configure(retriever: BaseRetriever, config: RunnableConfig, kwargs: dict[str, Any]) -> Any:
    return {
        "inheritable_callbacks": config.get("callbacks"),
        "local_callbacks": None,
        "verbose": bool(kwargs.get("verbose", False)),
        "inheritable_tags": config.get("tags"),
        "local_tags": retriever.tags,
        "inheritable_metadata": {
            **(config.get("metadata") or {}),
            **retriever._get_ls_params(**kwargs),
        },
        "local_metadata": retriever.metadata,
    }


def start_runs(
    retriever: BaseRetriever,
    inputs: Sequence[str],
    configs: Sequence[RunnableConfig],
    kwargs: dict[str, Any],
) -> list[CallbackManagerForRetrieverRun]:
    """``on_retriever_start`` for every query, with the callbacks ``invoke`` would use."""
    runs = []
    for query, config in zip(inputs, configs, strict=True):
        manager = CallbackManager.configure(**_configure(retriever, config, kwargs))
        name = config.get("run_name") or retriever.get_name()
        runs.append(manager.on_retriever_start(None, query, name=name, run_id=config.get("run_id")))
    return runs


async def astart_runs(
    retriever: BaseRetriever,
    inputs: Sequence[str],
    configs: Sequence[RunnableConfig],
    kwargs: dict[str, Any],
) -> list[AsyncCallbackManagerForRetrieverRun]:
    """Async :func:`start_runs`."""
    runs = []
    for query, config in zip(inputs, configs, strict=True):
        manager = AsyncCallbackManager.configure(**_configure(retriever, config, kwargs))
        name = config.get("run_name") or retriever.get_name()
        run = await manager.on_retriever_start(None, query, name=name, run_id=config.get("run_id"))
        runs.append(run)
    return runs


def first_error(outcomes: Sequence[Outcome], return_exceptions: bool) -> list[Any]:
    """The results in input order; raise the first failure unless it is to be returned."""
    if not return_exceptions:
        for ok, value in outcomes:
            if not ok:
                raise value
    return [value for _, value in outcomes]


def emit(run: Any, docs: list[Document]) -> None:
    """Report what a run resolved to as a custom event (only when someone listens)."""
    child = run.get_child()
    if child.handlers:
        dispatch_custom_event(RESOLUTION_EVENT, summary(docs), config={"callbacks": child})


async def aemit(run: Any, docs: list[Document]) -> None:
    """Async :func:`emit`."""
    child = run.get_child()
    if child.handlers:
        await adispatch_custom_event(RESOLUTION_EVENT, summary(docs), config={"callbacks": child})


def finish_runs(runs: Sequence[Any], outcomes: Sequence[Outcome]) -> None:
    """End each query's callback run with its documents or its error."""
    for run, (ok, value) in zip(runs, outcomes, strict=True):
        if ok:
            emit(run, value)
            run.on_retriever_end(value)
        else:
            run.on_retriever_error(value)


async def afinish_runs(runs: Sequence[Any], outcomes: Sequence[Outcome]) -> None:
    """Async :func:`finish_runs`."""
    for run, (ok, value) in zip(runs, outcomes, strict=True):
        if ok:
            await aemit(run, value)
            await run.on_retriever_end(value)
        else:
            await run.on_retriever_error(value)
