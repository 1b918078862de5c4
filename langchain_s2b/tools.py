"""The retriever as an agent tool, and the document formatter for LCEL chains.

An agent sees text; the application wants citations. :func:`as_tool` returns
a LangChain tool with ``response_format="content_and_artifact"``: the
``ToolMessage`` content is the contexts as numbered text (with source and
score) for the model, and its ``artifact`` is the list of retrieved
``Document`` objects, whose metadata keep ``score``, ``start``/``end`` and the
matched spans (``matches``) for the application.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from langchain_s2b.core.params import check_query

DEFAULT_TOOL_NAME = "search_documents"
DEFAULT_TOOL_DESCRIPTION = (
    "Search the indexed documents. Returns the passages most relevant to the query, "
    "numbered, each with its source and relevance score; cite them by number. "
    "Input: a self-contained search query."
)
SOURCE_FIELDS = ("title", "source", "source_id")


class SearchInput(BaseModel):
    """What the model passes to the retriever tool."""

    query: str = Field(description="A self-contained search query.")


def source_label(metadata: Mapping[str, Any]) -> str:
    """A short human name for a result's source (title, path or source id)."""
    for name in SOURCE_FIELDS:
        value = metadata.get(name)
        if value not in (None, ""):
            return str(value)
    return "unknown source"


def format_doc(doc: Document, number: int, max_chars: int | None = None) -> str:
    """One result as ``[n] source (score s, chars a-b)`` followed by its text."""
    meta = doc.metadata
    details = []
    if isinstance(meta.get("score"), int | float):
        details.append(f"score {meta['score']:.3f}")
    if "start" in meta and "end" in meta:
        details.append(f"chars {meta['start']}-{meta['end']}")
    header = f"[{number}] {source_label(meta)}"
    if details:
        header += f" ({', '.join(details)})"
    text = doc.page_content
    if max_chars is not None and len(text) > max_chars:
        lo, hi = excerpt_bounds(doc, max_chars)
        text = ("… " if lo else "") + text[lo:hi].strip() + (" …" if hi < len(text) else "")
    return f"{header}\n{text}"


def excerpt_bounds(doc: Document, max_chars: int) -> tuple[int, int]:
    """``[lo, hi)`` of ``page_content``: all of it, or ``max_chars`` around the best match.

    The best match (highest ``score`` in ``metadata["matches"]``) starts a quarter
    of the way in, so the reader sees it with some context before it.
    """
    size = len(doc.page_content)
    if max_chars <= 0 or size <= max_chars:
        return 0, size
    matches = doc.metadata.get("matches") or []
    centre = 0
    if matches:
        best = max(matches, key=lambda m: m.get("score", 0))
        centre = max(0, int(best["start"]) - int(doc.metadata.get("start", 0)))
    lo = max(0, min(centre - max_chars // 4, size - max_chars))
    return lo, lo + max_chars


def format_docs(docs: Sequence[Document], max_chars: int | None = None) -> str:
    """Results as numbered text blocks, ready for a prompt's ``{context}``.

    Example:
        .. code-block:: python

            chain = (
                {"context": retriever | format_docs, "question": RunnablePassthrough()}
                | prompt
                | llm
            )
    """
    return "\n\n".join(format_doc(doc, i, max_chars) for i, doc in enumerate(docs, 1))


def as_tool(
    retriever: BaseRetriever,
    name: str = DEFAULT_TOOL_NAME,
    description: str = DEFAULT_TOOL_DESCRIPTION,
    *,
    max_chars: int | None = None,
    **retrieval_kwargs: Any,
) -> StructuredTool:
    """Wrap a retriever as a tool that returns text for the model and documents for you.

    Args:
        retriever: any LangChain retriever (a ``SmallToBigRetriever`` gives
            scores, spans and matches in each document's metadata).
        name: the tool name the model sees.
        description: what the model is told the tool does.
        max_chars: show at most this many characters of each context in the
            *content*, around its best match (the artifact keeps the full documents).
        **retrieval_kwargs: per-call options passed to ``retriever.invoke``
            (``k``, ``mode``, ``window_size``, ``max_tokens`` ...).

    Returns:
        A ``StructuredTool`` with ``response_format="content_and_artifact"``:
        calling it with a tool call yields a ``ToolMessage`` whose ``content``
        is :func:`format_docs` of the results and whose ``artifact`` is the list
        of ``Document`` results.

    Example:
        .. code-block:: python

            tool = as_tool(retriever, k=3)
            msg = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name,
                               "args": {"query": "who was Rollo?"}})
            msg.artifact[0].metadata["matches"]
    """
    if not isinstance(retriever, BaseRetriever):
        msg = f"as_tool needs a LangChain BaseRetriever; got {type(retriever).__name__}."
        raise TypeError(msg)
    if not name.strip():
        msg = "The tool name must not be empty."
        raise ValueError(msg)

    def search(query: str, callbacks: Callbacks = None) -> tuple[str, list[Document]]:
        check_query(query)
        docs = retriever.invoke(query, config={"callbacks": callbacks}, **retrieval_kwargs)
        return format_docs(docs, max_chars) or "No results.", docs

    async def asearch(query: str, callbacks: Callbacks = None) -> tuple[str, list[Document]]:
        check_query(query)
        docs = await retriever.ainvoke(query, config={"callbacks": callbacks}, **retrieval_kwargs)
        return format_docs(docs, max_chars) or "No results.", docs

    return StructuredTool(
        name=name,
        description=description,
        func=search,
        coroutine=asearch,
        args_schema=SearchInput,
        response_format="content_and_artifact",
    )
