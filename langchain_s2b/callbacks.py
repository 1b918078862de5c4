"""LangChain callbacks: one retriever run per batched query, and the resolution event."""

from __future__ import annotations

from collections.abc import Sequence
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

from langchain_s2b.core.batch import Outcome
from langchain_s2b.core.hits import RESOLUTION_EVENT, summary


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
    if not run.inheritable_handlers:
        return
    child = run.get_child()
    if child.handlers:
        dispatch_custom_event(RESOLUTION_EVENT, summary(docs), config={"callbacks": child})


async def aemit(run: Any, docs: list[Document]) -> None:
    """Async :func:`emit`."""
    if not run.inheritable_handlers:
        return
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
