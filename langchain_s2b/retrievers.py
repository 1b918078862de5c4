"""SmallToBigRetriever: search small children, return big context.

Glue only: the pure work lives in ``splitting``, ``ingest``, ``resolve`` and
``multilevel``. Sync and async share one generator per operation; the
generator *yields* I/O requests and the two drivers below carry them out, so
the sync and async bodies differ only at the I/O lines.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.stores import BaseStore, InMemoryStore
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, model_validator
from typing_extensions import Self

from langchain_s2b import lifecycle, ops
from langchain_s2b.ops import Embed, Fetch, Search
from langchain_s2b.index import FaissIndex
from langchain_s2b.ingest import IndexingResult
from langchain_s2b.params import Mode, QueryParams, check, with_overrides
from langchain_s2b.plans import PLANS, RESOLUTION_EVENT, Plan, summary
from langchain_s2b.search import Searcher
from langchain_s2b.splitting import Level, check_levels, default_levels
from langchain_s2b.stores import DocumentCodecStore

logger = logging.getLogger(__name__)
T = TypeVar("T")


class SmallToBigRetriever(BaseRetriever):
    """Search small children in a vector index; return parents, windows or documents.

    Setup:
        .. code-block:: bash

            pip install -U langchain-s2b "langchain-s2b[local]"

    Key init args:
        vectorstore: the child index (``FaissIndex`` by default; any LangChain
            ``VectorStore`` that returns scores works).
        docstore: a ``BaseStore[str, Document]`` of nodes (parents, neighbours,
            documents), or pass ``byte_store`` for any byte store (JSON codec).
        mode: ``"parent"``, ``"window"`` or ``"multilevel"``.
        k: number of *results* (parents, windows, contexts), not of children.

    Instantiate:
        .. code-block:: python

            from langchain_s2b import SmallToBigRetriever
            from langchain_core.embeddings import DeterministicFakeEmbedding

            retriever = SmallToBigRetriever.from_documents(
                docs, DeterministicFakeEmbedding(size=64), mode="parent", k=3
            )

    Usage:
        .. code-block:: python

            docs = retriever.invoke("who was Rollo?", k=2)
            docs[0].metadata["score"], docs[0].metadata["matches"]

    Use within a chain:
        .. code-block:: python

            chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm

    Scores are cosine similarities of the best-matching child (max
    aggregation); higher is better. Every result's ``start``/``end`` is its span
    in the source text, and ``matches`` lists each matched child's span and score.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    """The child index: only the finest level is embedded here."""
    docstore: BaseStore[str, Document] = Field(default_factory=InMemoryStore)
    """Every node (leaves, parents, documents) and the per-source manifests."""
    byte_store: BaseStore[str, bytes] | None = None
    """A byte store to hold the nodes instead, through a safe JSON codec."""
    mode: Mode = "parent"
    """What one result is: a parent, a window, or an escalated context."""
    levels: list[Level] | None = None
    """Levels finest first; defaults depend on ``mode`` and the splitters below."""
    child_splitter: Any = None
    """Splitter of the embedded level (default: ~300 tokens, or sentences)."""
    parent_splitter: Any = None
    """Splitter of the parent level in parent mode (default: ~1,200 tokens)."""
    k: int = Field(default=4, gt=0)
    """Results per query (parents, windows or contexts)."""
    fetch_k: int = Field(default=20, gt=0)
    """Children fetched by the first search; doubled until ``k`` results exist."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Defaults for per-call options (``filter``, ``window_size`` ...)."""
    window_size: int = Field(default=3, ge=0)
    """Neighbours on each side of a hit, in window mode."""
    window_before: int | None = Field(default=None, ge=0)
    """Neighbours before a hit (overrides ``window_size`` on that side)."""
    window_after: int | None = Field(default=None, ge=0)
    """Neighbours after a hit (overrides ``window_size`` on that side)."""
    coalesce: bool = True
    """Merge windows of one source that overlap or touch."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Token budget for all results together (estimated offline, 4 chars/token)."""
    margin: float = Field(default=0.1, ge=0)
    """Multilevel: hits within this score of the best count as evidence."""
    merge_threshold: float | None = Field(default=None, ge=0, lt=1)
    """Multilevel: also merge into a parent when more than this share of its children hit."""
    source_id_key: str | list[str] | None = None
    """Metadata field(s) that identify a source; default ``Document.id`` or a content hash."""
    on_missing: str = Field(default="raise", pattern="^(raise|skip)$")
    """A node missing from the docstore: ``"raise"``, or ``"skip"`` (logged and counted)."""

    _levels: list[Level] = PrivateAttr(default_factory=list)
    _searcher: Searcher = PrivateAttr()
    _rwlock: lifecycle.ReadWriteLock = PrivateAttr(default_factory=lifecycle.ReadWriteLock)

    @model_validator(mode="after")
    def _setup(self) -> Self:
        if self.byte_store is not None:
            self.docstore = DocumentCodecStore(self.byte_store)
        self._levels = check_levels(
            self.levels or default_levels(self.mode, self.child_splitter, self.parent_splitter)
        )
        self._searcher = Searcher(self.vectorstore)
        check(self.defaults())
        return self

    # Construction --------------------------------------------------------------

    @classmethod
    def from_documents(
        cls, documents: Sequence[Document], embedding: Embeddings, *,
        ids: Sequence[str] | None = None, index_factory: str = "Flat", **fields: Any,
    ) -> SmallToBigRetriever:
        """Build a FAISS-backed retriever and add ``documents`` in one call."""
        retriever = cls(vectorstore=FaissIndex(embedding, index_factory), **fields)
        retriever.add_documents(documents, ids=ids)
        return retriever

    def defaults(self) -> QueryParams:
        """The constructor's retrieval options, before per-call overrides."""
        base = QueryParams(
            mode=self.mode, k=self.k, fetch_k=self.fetch_k, window_size=self.window_size,
            window_before=self.window_before, window_after=self.window_after,
            coalesce=self.coalesce, max_tokens=self.max_tokens, margin=self.margin,
            merge_threshold=self.merge_threshold,
        )
        return with_overrides(base, self.search_kwargs)

    # Ingestion and deletion ----------------------------------------------------

    def add_documents(
        self, documents: Sequence[Document], ids: Sequence[str] | None = None
    ) -> IndexingResult:
        """Split, embed and store documents; unchanged sources are skipped."""
        return self._drive(lifecycle.add(self._lifecycle_config(), documents, ids), write=True)

    async def aadd_documents(
        self, documents: Sequence[Document], ids: Sequence[str] | None = None
    ) -> IndexingResult:
        """Async :meth:`add_documents`."""
        gen = lifecycle.add(self._lifecycle_config(), documents, ids)
        return await self._adrive(gen, write=True)

    def delete(self, source_ids: Sequence[str]) -> list[str]:
        """Remove sources from both stores; returns the ids that existed."""
        return self._drive(lifecycle.delete(source_ids), write=True)

    async def adelete(self, source_ids: Sequence[str]) -> list[str]:
        """Async :meth:`delete`."""
        return await self._adrive(lifecycle.delete(source_ids), write=True)

    def _lifecycle_config(self) -> lifecycle.Config:
        key = self.source_id_key
        fields = [key] if isinstance(key, str) else list(key or [])
        limit = getattr(self._searcher.embeddings, "max_input_tokens", None)
        return lifecycle.Config(self._levels, fields, limit)

    # Retrieval -----------------------------------------------------------------

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        params = with_overrides(self.defaults(), kwargs)
        docs: list[Document] = self._drive(self._retrieve(query, params))
        dispatch_custom_event(RESOLUTION_EVENT, summary(docs), config={"callbacks": run_manager.get_child()})
        return docs

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        params = with_overrides(self.defaults(), kwargs)
        docs: list[Document] = await self._adrive(self._retrieve(query, params))
        await adispatch_custom_event(
            RESOLUTION_EVENT, summary(docs), config={"callbacks": run_manager.get_child()}
        )
        return docs

    def _retrieve(self, query: str, params: QueryParams) -> Generator[ops.Request, Any, list[Document]]:
        """Search, over-fetching until ``k`` results exist; then one batched fetch."""
        plan: Plan = PLANS[params.mode]
        vector = yield Embed(query)
        fetch = max(params.fetch_k, params.k)
        while True:
            hits, exhausted = yield Search(vector, query, fetch, params.filter)
            groups = plan.group(hits, params)
            if len(groups) >= params.k or exhausted:
                break
            fetch *= 2
        chosen = plan.select(groups, params)
        keys = list(dict.fromkeys(key for group in chosen for key in group.keys))
        values = yield Fetch(keys)
        fetched = dict(zip(keys, values))
        return plan.assemble(chosen, fetched, params, self.on_missing)

    # The two drivers: the only place where sync and async differ -------------

    def _drive(self, gen: Generator[Any, Any, T], *, write: bool = False) -> T:
        """Run one operation; a reader/writer lock keeps readers off half-done writes."""
        with self._rwlock.hold(write=write):
            try:
                request = next(gen)
                while True:
                    request = gen.send(self._do(request))
            except StopIteration as stop:
                result: T = stop.value
                return result

    async def _adrive(self, gen: Generator[Any, Any, T], *, write: bool = False) -> T:
        async with self._rwlock.ahold(write=write):
            try:
                request = next(gen)
                while True:
                    request = gen.send(await self._ado(request))
            except StopIteration as stop:
                result: T = stop.value
                return result

    def _do(self, request: ops.Request) -> Any:
        return ops.run(request, self._searcher, self.docstore)

    async def _ado(self, request: ops.Request) -> Any:
        return await ops.arun(request, self._searcher, self.docstore)
