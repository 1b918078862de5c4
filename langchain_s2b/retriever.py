"""SmallToBigRetriever: search small children, return big context (glue only).

The work lives in :mod:`langchain_s2b.core` (pure operations that yield I/O
requests) and :mod:`langchain_s2b.store` (the runner that carries them out).
This class holds the fields and one sync and one async path per public
method, which differ only in calling the runner's ``drive`` or ``adrive``.
"""

from __future__ import annotations

import copy
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

# What LangChain imports on the first invoke of any runnable (its callbacks' tracers, ~20 ms
# here), imported with the retriever: a retriever's first query costs what any query costs.
import langchain_core.tracers.context
import langchain_core.tracers.langchain
import langchain_core.tracers.stdout  # noqa: F401
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.stores import BaseStore, InMemoryByteStore
from langchain_core.tools import BaseTool
from langchain_core.vectorstores import VectorStore
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from typing_extensions import Self

from langchain_s2b import callbacks, tools
from langchain_s2b.core import lifecycle
from langchain_s2b.core import verify as checks
from langchain_s2b.core.batch import lockstep
from langchain_s2b.core.budget import TokenCounter, approximate_tokens, estimate_tokens
from langchain_s2b.core.headers import check_headers, default_headers, describe_headers
from langchain_s2b.core.ingest import IndexingResult
from langchain_s2b.core.model_proxies import WrittenProxies, written_proxies
from langchain_s2b.core.params import (
    CONFIDENCE,
    MARGIN,
    OVERRIDABLE,
    Mode,
    Overrides,
    QueryParams,
    check,
    check_query,
    check_tree,
    with_overrides,
)
from langchain_s2b.core.proxies import NodeProxies, Proxy
from langchain_s2b.core.requests import Op
from langchain_s2b.core.retrieval import retrieve
from langchain_s2b.core.splitters import default_levels
from langchain_s2b.core.tree import Level, check_levels
from langchain_s2b.embeddings import query_window
from langchain_s2b.store.children import ChildIndex, DenseChildIndex, HybridChildIndex
from langchain_s2b.store.nodes import (
    ContextWriter,
    DocumentCodecStore,
    NodeStore,
    model_name,
    proxy_writer,
)
from langchain_s2b.store.runner import Runner
from langchain_s2b.store.snapshots import persist
from langchain_s2b.store.vectors import FaissIndex

T = TypeVar("T")
_NOT_SAVED = frozenset(
    {"vectorstore", "docstore", "byte_store", "levels", "child_splitter", "parent_splitter"}
    | {"callbacks", "token_counter", "context_cache", "reranker"}
    | {"contextual_headers", "context_model"}  # saved as what is embedded: persist.embedded
    | {"node_proxies"}  # a callable: its proxies are saved as children
    | {"proxies", "proxy_model"}
)


_DEFAULT_FIELDS = tuple(sorted(OVERRIDABLE - {"filter"}))
_READ_DEFAULTS = operator.attrgetter(*_DEFAULT_FIELDS, "search_kwargs")


class SmallToBigRetriever(BaseRetriever):
    """Search small children in a vector index; return parents, windows or documents.

    Setup:
        .. code-block:: bash

            pip install -e ".[local]"  # in a clone of the repository (not on PyPI)

    Key init args:
        vectorstore: the child index (``FaissIndex`` by default; any LangChain
            ``VectorStore`` that returns scores works).
        docstore: a ``BaseStore[str, Document]`` of nodes (parents, neighbours,
            documents), or pass ``byte_store`` for any byte store (JSON codec).
        mode: ``"parent"``, ``"window"``, ``"multilevel"`` or ``"pack"``.
        k: number of *results* (parents, windows, contexts), not of children.
        contextual_headers: embed and search each child under its document's title
            and section path (results carry their best match's ``heading``); ``None``
            (the default) turns it on when the leaves are sentences (window,
            multilevel and pack trees) and off for chunk leaves (parent mode's
            default), as measured; a callable ``(document, leaf) -> str`` writes its own.
        context_model: a chat model that writes a context for each paragraph,
            embedded and searched with its children (Anthropic's contextual retrieval).
        proxies, proxy_model: a chat model that writes ``"propositions"`` (Dense X,
            per paragraph), ``"summaries"`` (per section) or ``"questions"`` (per
            paragraph), searched in place of the spans they stand for.
        score_threshold: a floor on the cosine (``None``: off); results whose best
            hit scores below it are not returned, so an answer may be empty.

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

            context = retriever | format_docs
            chain = {"context": context, "question": RunnablePassthrough()} | prompt | llm

    Scores are cosine similarities of the best-matching child (max
    aggregation); higher is better. Every result's ``start``/``end`` is its span
    in the source text, and ``matches`` lists each matched child's span and score.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    """The child index: only the finest level is embedded here."""
    docstore: BaseStore[str, Document] = Field(default_factory=NodeStore)
    """Every node (leaves, parents, documents) and the per-source manifests (default: a
    ``NodeStore``, in memory, each node a span over its source's text)."""
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
    k: int | None = Field(default=None, gt=0)
    """Results per query (parents, windows or contexts); ``None``: 4, or as many as fit a budget."""
    fetch_k: int = Field(default=16, gt=0)
    """Children fetched by the first search; doubled until ``k`` results exist."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Defaults for per-call options (``filter``, ``window_size`` ...)."""
    window_size: int = Field(default=1, ge=0)
    """Neighbours on each side of a hit, in window mode."""
    window_before: int | None = Field(default=None, ge=0)
    """Neighbours before a hit (overrides ``window_size`` on that side)."""
    window_after: int | None = Field(default=None, ge=0)
    """Neighbours after a hit (overrides ``window_size`` on that side)."""
    coalesce: bool = True
    """Windows of one source never share a split: a hit inside a better window joins it."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Token ceiling for all results together: each whole when it fits, else cut (README)."""
    token_counter: TokenCounter = approximate_tokens
    """Text -> tokens for ``max_tokens`` (e.g. ``chat_model.get_num_tokens``; not saved)."""
    hybrid: bool = True
    """Rank children by dense and BM25 scores fused by z-scores (needs ``tantivy``)."""
    parent_level: str | None = None
    """Parent mode: the level of the parent returned (default: the child's nearest ancestor)."""
    reranker: BaseDocumentCompressor | None = None
    """Reorders the ``fetch_k`` best children before the evidence and any budget (not saved)."""
    score_threshold: float | None = None
    """A floor on ``score`` (the cosine, in the embedding model's own units): a result whose
    best hit scores below it is not returned, in every mode; ``None`` (the default): off."""
    margin: float = Field(default=MARGIN, ge=0)
    """Evidence: hits within this many standard deviations of the query's scores of the best."""
    confidence: float = Field(default=CONFIDENCE, ge=0)
    """Confident evidence (it decides multilevel escalations): within this many std devs."""
    merge_threshold: float | None = Field(default=None, ge=0, lt=1)
    """Multilevel: also merge into a parent when more than this share of its children hit."""
    source_id_key: str | list[str] | None = None
    """Metadata field(s) that identify a source; default ``Document.id`` or a content hash."""
    on_missing: str = Field(default="raise", pattern="^(raise|skip)$")
    """A node missing from the docstore: ``"raise"``, or ``"skip"`` (logged and counted)."""
    contextual_headers: bool | Callable[[Document, Document], str] | None = None
    """Embed and lexically index each leaf under its title and section path (README); or a
    callable ``(document, leaf) -> header``; ``None``: on for sentence leaves, off for chunk
    leaves (resolved at construction). Results carry their best match's ``heading``."""
    context_model: BaseChatModel | None = None
    """A chat model that writes a context for each paragraph, embedded with its sentences."""
    context_cache: BaseStore[str, bytes] | None = None
    """Where the model's contexts (and proxies) are kept by digest (default: in memory)."""
    node_proxies: NodeProxies | None = None
    """The user's proxies by node, on every add: ``(document, node) -> texts`` standing for
    the node's span, called for every node of every level (README, Proxies)."""
    proxies: Literal["propositions", "summaries", "questions"] | None = None
    """Model-written proxies (issue 35): ``"propositions"`` per paragraph (Dense X),
    ``"summaries"`` per section or ``"questions"`` per paragraph; needs ``proxy_model``."""
    proxy_model: BaseChatModel | None = None
    """The chat model that writes the ``proxies`` (cached by digest in ``context_cache``)."""

    _levels: list[Level] = PrivateAttr(default_factory=list)
    _io: Runner = PrivateAttr()
    _contexts: BaseStore[str, bytes] = PrivateAttr(default_factory=InMemoryByteStore)
    _context_name: str | None = PrivateAttr(default=None)
    """The name the contexts were written under, when not the model's own (the command line
    names a store's model by its ``provider:model``, also where it makes no model)."""
    _proxy_name: str | None = PrivateAttr(default=None)
    """The name the proxies were written under, when not the model's own (as above)."""
    _proxy_kind: str | None = PrivateAttr(default=None)
    """The proxies' kind when no model is made (the command line's readers: as above)."""
    _defaults: tuple[tuple[Any, ...], QueryParams] | None = PrivateAttr(default=None)
    _overrides: Overrides | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:
            msg = (
                f"Unknown SmallToBigRetriever option(s) {unknown}; allowed: "
                f"{sorted(type(self).model_fields)} (per-call defaults go in search_kwargs=)."
            )
            raise ValueError(msg)
        byte_store, docstore = data.get("byte_store"), data.get("docstore")
        if byte_store is not None and docstore is not None and not _codec_of(docstore, byte_store):
            msg = (
                "Pass docstore= (a BaseStore of Documents) or byte_store= (a BaseStore of "
                "bytes, stored through the JSON codec), not both."
            )
            raise ValueError(msg)
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise ValueError(_one_line(err)) from None

    @field_validator("contextual_headers", mode="plain")
    @classmethod
    def _check_headers(cls, value: Any) -> bool | Callable[[Document, Document], str] | None:
        return check_headers(value)

    @model_validator(mode="after")
    def _setup(self) -> Self:
        self._wire()
        check_tree(check(self.defaults()), [level.name for level in self._levels])
        return self

    def _wire(self) -> None:
        """Build what the fields imply: the levels, the child index and the runner."""
        if self.byte_store is not None and not _codec_of(self.docstore, self.byte_store):
            self.docstore = DocumentCodecStore(self.byte_store)
        self._levels = check_levels(
            self.levels or default_levels(self.mode, self.child_splitter, self.parent_splitter)
        )
        if self.contextual_headers is None:  # by the leaves, once: what the index holds
            self.__dict__["contextual_headers"] = default_headers(self._levels[0].name)
        index: ChildIndex = (
            HybridChildIndex(self.vectorstore) if self.hybrid else DenseChildIndex(self.vectorstore)
        )
        _check_proxies(self.proxies, self.proxy_model)
        cache = self.context_cache if self.context_cache is not None else self._contexts
        contexts = None
        if self.context_model is not None:
            contexts = ContextWriter(self.context_model, cache)
        proxies = None if self.proxy_model is None else proxy_writer(self.proxy_model, cache)
        self._io = Runner(index, self.docstore, contexts, proxies)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; it uses exactly the stores it names.

        A copy that names other stores (``vectorstore``, ``docstore``,
        ``byte_store``), levels or ``hybrid`` gets its own child index and
        runner; any other copy shares this retriever's (and builds nothing).
        Naming a ``docstore`` replaces a ``byte_store``. ``deep=True`` is
        refused (see :meth:`__deepcopy__`).
        """
        if deep:
            raise TypeError(_NO_DEEP_COPY)
        fields = dict(update or {})
        if "docstore" in fields and "byte_store" not in fields:
            fields["byte_store"] = None
        copied = super().model_copy(update=fields)
        if _REWIRED & set(fields):
            copied._wire()
        check(copied.defaults())
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        raise TypeError(_NO_DEEP_COPY)

    def __getstate__(self) -> dict[Any, Any]:
        raise TypeError(_NO_DEEP_COPY)

    # Construction --------------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        embedding: Embeddings,
        *,
        ids: Sequence[str] | None = None,
        index_factory: str = "Flat",
        **fields: Any,
    ) -> SmallToBigRetriever:
        """Build a FAISS-backed retriever and add ``documents`` in one call."""
        retriever = cls(vectorstore=FaissIndex(embedding, index_factory), **fields)
        retriever.add_documents(documents, ids=ids)
        return retriever

    def defaults(self) -> QueryParams:
        """The constructor's retrieval options, before per-call overrides.

        Built and checked once, then kept while the fields it reads stay equal
        (an assignment or ``model_copy(update=...)`` builds it again).
        """
        values = _READ_DEFAULTS(self)
        private = _private(self)
        kept: tuple[tuple[Any, ...], QueryParams] | None = private["_defaults"]
        try:
            if kept is not None and kept[0] == values:
                return kept[1]
        except (TypeError, ValueError):  # a value without a plain ``==`` (a numpy array)
            pass
        fields = dict(zip(_DEFAULT_FIELDS, values, strict=False))
        params = with_overrides(QueryParams(**fields), self.search_kwargs)
        try:  # a copy, so that a search_kwargs changed in place is seen
            private["_defaults"] = ((*values[:-1], copy.deepcopy(self.search_kwargs)), params)
        except (TypeError, copy.Error):
            private["_defaults"] = None
        return params

    # Ingestion and deletion ----------------------------------------------------

    def add_documents(
        self,
        documents: Sequence[Document],
        ids: Sequence[str] | None = None,
        *,
        proxies: Sequence[Sequence[Proxy]] | None = None,
    ) -> IndexingResult:
        """Split, embed and store documents; unchanged sources are skipped.

        All or nothing: when a call fails (the embedding, a store), every source
        keeps the version it had. The embedding runs before the write lock is
        taken, so queries do not wait for it. ``proxies``: each document's own
        proxies (README, Proxies), a list of ``Proxy`` per document.
        """
        config = self._lifecycle_config()
        stage = lifecycle.stage(config, documents, ids, proxies=proxies)
        staged = self._io.drive(stage, locked=False)
        return self._io.drive(lifecycle.commit(config, staged), write=True)

    async def aadd_documents(
        self,
        documents: Sequence[Document],
        ids: Sequence[str] | None = None,
        *,
        proxies: Sequence[Sequence[Proxy]] | None = None,
    ) -> IndexingResult:
        """Async :meth:`add_documents`."""
        config = self._lifecycle_config()
        stage = lifecycle.stage(config, documents, ids, proxies=proxies)
        staged = await self._io.adrive(stage, locked=False)
        return await self._io.adrive(lifecycle.commit(config, staged), write=True)

    def delete(self, source_ids: Sequence[str]) -> list[str]:
        """Remove sources from both stores; returns the ids that existed."""
        return self._io.drive(lifecycle.delete(source_ids), write=True)

    async def adelete(self, source_ids: Sequence[str]) -> list[str]:
        """Async :meth:`delete`."""
        return await self._io.adrive(lifecycle.delete(source_ids), write=True)

    def _lifecycle_config(self) -> lifecycle.Config:
        key = self.source_id_key
        fields = [key] if isinstance(key, str) else list(key or [])
        emb = self._io.index.embeddings
        limit = getattr(emb, "max_input_tokens", None)
        counter = getattr(emb, "count_tokens", None)
        return lifecycle.Config(
            self._levels,
            fields,
            limit,
            counter if limit is not None and callable(counter) else estimate_tokens,
            headers=False if self.contextual_headers is None else self.contextual_headers,
            context_model=self._context_model_name(),
            node_proxies=self.node_proxies,
            write_proxies=self._write_proxies(),
        )

    def _context_model_name(self) -> str | None:
        """The name of the model that writes the contexts (cache keys, digests, saves)."""
        if self._context_name is not None:
            return self._context_name
        return None if self.context_model is None else model_name(self.context_model)

    def _proxy_setting(self) -> dict[str, str] | None:
        """The model-written proxies' kind and model name (cache keys, saves)."""
        kind = self.proxies or self._proxy_kind
        name = self._proxy_name
        if name is None and self.proxy_model is not None:
            name = model_name(self.proxy_model)
        return None if kind is None or name is None else {"kind": kind, "model": name}

    def _write_proxies(self) -> WrittenProxies | None:
        """The lifecycle's ``write_proxies`` hook (``None``: no model-written proxies)."""
        setting = self._proxy_setting()
        return None if setting is None else written_proxies(setting["kind"], setting["model"])

    def _embedded(self) -> dict[str, Any]:
        """What is embedded beside each leaf's text, as a save records it."""
        model = self._context_model_name()
        headers = describe_headers(self.contextual_headers)
        return persist.embedded_setting(headers, model, self._proxy_setting())

    # Retrieval -----------------------------------------------------------------

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        io, op = self._retrieval(query, kwargs)
        docs = io.drive(op)
        callbacks.emit(run_manager, docs)
        return docs

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        io, op = self._retrieval(query, kwargs)
        docs = await io.adrive(op)
        await callbacks.aemit(run_manager, docs)
        return docs

    def _retrieval(
        self, query: Any, overrides: dict[str, Any]
    ) -> tuple[Runner, Op[list[Document]]]:
        """The runner and one query's retrieval (``invoke`` and ``ainvoke`` drive it)."""
        io: Runner = _private(self)["_io"]
        return io, retrieve(self._read(query, io), self._params(overrides), self.on_missing)

    @staticmethod
    def _read(query: Any, io: Runner) -> str:
        """The query as the model reads it: cut to its input window before any work.

        The longest prefix, ending at a word, that the embedding model reads
        (:func:`~langchain_s2b.embeddings.query_window`); the lexical search
        sees the same text.
        """
        _check_query(query)
        return str(query_window(io.index.embeddings).prefix(query))

    def _params(self, overrides: dict[str, Any]) -> QueryParams:
        params = self.defaults()
        private = _private(self)
        if overrides:
            kept = private["_overrides"]
            if kept is None or kept.base is not params:  # checked over these defaults only
                kept = private["_overrides"] = Overrides(params)
            params = kept.apply(overrides)
        return check_tree(params, [level.name for level in private["_levels"]])

    def as_tool(
        self,
        args_schema: Any = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arg_types: Any = None,
        **retrieval_kwargs: Any,
    ) -> BaseTool:
        """This retriever as an agent tool: contexts as text, documents as the artifact."""
        if args_schema is not None or arg_types is not None:
            return super().as_tool(
                args_schema, name=name, description=description, arg_types=arg_types
            )
        self._params({k: v for k, v in retrieval_kwargs.items() if k != "max_chars"})
        return tools.as_tool(
            self,
            name or tools.DEFAULT_TOOL_NAME,
            description or tools.DEFAULT_TOOL_DESCRIPTION,
            **retrieval_kwargs,
        )

    # Persistence and verification ----------------------------------------------

    def save(self, path: str | Path, *, include_docstore: bool | None = None) -> Path:
        """Save the child index, the in-memory docstore and the configuration.

        Atomic (a crash leaves the previous save loadable) and pickle-free; see
        :mod:`langchain_s2b.persist`. A docstore on disk or in a server is not
        copied unless ``include_docstore=True``: pass it again to :meth:`load`.
        """
        store = self.vectorstore
        lexical = store.lexical_to_save() if isinstance(store, FaissIndex) else None
        saved = persist.Saved(
            store, self.docstore, self._levels, self._options(), lexical, self._embedded()
        )
        with self._io.lock.hold(write=False):
            return persist.save(saved, path, include_docstore=include_docstore)

    def _options(self) -> dict[str, Any]:
        """The options that differ from their defaults, as JSON (for :meth:`save`)."""
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            if name in _NOT_SAVED:
                continue
            value = getattr(self, name)
            if not info.is_required() and value == info.get_default(call_default_factory=True):
                continue
            try:
                out[name] = json.loads(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError):
                msg = (
                    f"The retriever option {name}={value!r} can not be saved as JSON; "
                    f"remove it before save() and pass {name}=... to load() instead."
                )
                raise ValueError(msg) from None
        return out

    @classmethod
    def load(
        cls,
        path: str | Path,
        embedding: Embeddings,
        *,
        docstore: BaseStore[str, Document] | None = None,
        byte_store: BaseStore[str, bytes] | None = None,
        vectorstore: VectorStore | None = None,
        splitters: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> SmallToBigRetriever:
        """Load a :meth:`save`; checks the format version and the embedding's dimension.

        Keyword arguments: ``docstore=``/``byte_store=`` (required when the save
        did not copy its store), ``vectorstore=``, ``splitters={level: splitter}``
        for custom splitters, and any retriever option to override.

        What is embedded beside each leaf is the save's: its ``contextual_headers``
        (a callable must be passed again) and its context model (pass it again as
        ``context_model=``); another setting is refused in one line.
        """
        loaded = persist.load(
            path,
            embedding,
            docstore=docstore,
            byte_store=byte_store,
            vectorstore=vectorstore,
            splitters=splitters,
        )
        fields = {**loaded.options, **overrides}
        unknown = sorted(set(fields) - set(cls.model_fields))
        if unknown:
            msg = f"{path}: unknown retriever options {unknown}."
            raise ValueError(msg)
        saved = loaded.embedded or persist.NOTHING_EMBEDDED
        if "contextual_headers" not in fields:
            if saved["contextual_headers"] == "custom":
                msg = (
                    f"{path} was built with a contextual_headers callable; pass it again: "
                    "load(path, embedding, contextual_headers=<the callable>)."
                )
                raise ValueError(msg)
            fields["contextual_headers"] = saved["contextual_headers"] == "sections"
        headers = check_headers(fields.get("contextual_headers", False))
        model = fields.get("context_model")
        was = saved.get("proxies")
        if was is not None and "proxies" not in fields:
            fields["proxies"] = was["kind"]
        kind, writer = fields.get("proxies"), fields.get("proxy_model")
        persist.check_embedded(
            path,
            saved,
            describe_headers(headers),
            None if model is None else model_name(model),
            None if kind is None or writer is None else {"kind": kind, "model": model_name(writer)},
        )
        if isinstance(loaded.vectorstore, FaissIndex) and loaded.lexical is not None:
            loaded.vectorstore.adopt_lexical(loaded.lexical)  # else built from its records
        return cls(vectorstore=loaded.vectorstore, levels=loaded.levels, **loaded.stores, **fields)

    def verify(self, *, repair: bool = False, digests: bool = False) -> checks.VerifyReport:
        """Check that the child index, the docstore and the manifests agree.

        With ``repair=True``, delete orphans and re-index (or remove) sources
        with missing pieces. With ``digests=True``, also split every stored
        source again and compare it with its manifest's digest and its stored
        nodes (only meaningful with the split configuration the sources were
        written with); see :mod:`langchain_s2b.core.verify`.
        """
        op = checks.check(self._lifecycle_config(), repair=repair, digests=digests)
        return self._io.drive(op, write=repair)

    async def averify(self, *, repair: bool = False, digests: bool = False) -> checks.VerifyReport:
        """Async :meth:`verify`."""
        op = checks.check(self._lifecycle_config(), repair=repair, digests=digests)
        return await self._io.adrive(op, write=repair)

    # Batch -------------------------------------------------------------------------

    def batch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Retrieve for many queries together: one embedding call, one search, one fetch.

        Every query runs the generator ``invoke`` runs, in lock-step with the
        others (:mod:`langchain_s2b.batch`), so each gets what ``invoke(query,
        **kwargs)`` returns (a FAISS matrix search may round a score differently
        in its last float32 digit), and its own callback run. Queries are
        embedded by the model's ``embed_queries`` when it has one.
        """
        if not inputs:
            return []
        kwargs.pop("run_id", None)
        runs = callbacks.start_runs(self, inputs, get_config_list(config, len(inputs)), kwargs)
        try:
            outcomes = self._io.drive(lockstep(self._retrievals(inputs, kwargs)))
        except ValueError as err:
            outcomes = [(False, err)] * len(inputs)
        callbacks.finish_runs(runs, outcomes)
        return callbacks.first_error(outcomes, return_exceptions)

    async def abatch(
        self,
        inputs: list[str],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async :meth:`batch`."""
        if not inputs:
            return []
        kwargs.pop("run_id", None)
        configs = get_config_list(config, len(inputs))
        runs = await callbacks.astart_runs(self, inputs, configs, kwargs)
        try:
            outcomes = await self._io.adrive(lockstep(self._retrievals(inputs, kwargs)))
        except ValueError as err:
            outcomes = [(False, err)] * len(inputs)
        await callbacks.afinish_runs(runs, outcomes)
        return callbacks.first_error(outcomes, return_exceptions)

    def _retrievals(self, inputs: list[str], kwargs: dict[str, Any]) -> list[Op[list[Document]]]:
        params = self._params(kwargs)
        io: Runner = _private(self)["_io"]
        queries = [self._read(query, io) for query in inputs]
        return [retrieve(query, params, self.on_missing) for query in queries]


_REWIRED = frozenset(
    {"vectorstore", "docstore", "byte_store", "levels", "child_splitter", "parent_splitter"}
    | {"hybrid", "mode", "context_model", "context_cache", "proxies", "proxy_model"}
)
"""Fields whose change gives a copy its own child index and runner."""
_NO_DEEP_COPY = (
    "A SmallToBigRetriever can not be deep-copied or pickled: it holds live stores (a FAISS "
    "index, a docstore, a lock). Use model_copy(update=...) for a copy over the same or other "
    "stores, or save() and load()."
)


def _check_proxies(kind: str | None, model: BaseChatModel | None) -> None:
    """Model-written proxies need both their kind and their model."""
    if (kind is None) != (model is None):
        given, missing = ("proxies", "proxy_model") if model is None else ("proxy_model", "proxies")
        msg = (
            f"{given}= was set without {missing}=; model-written proxies need both "
            "(proxies='propositions'|'summaries'|'questions' and a chat model as proxy_model)."
        )
        raise ValueError(msg)


def _codec_of(docstore: Any, byte_store: Any) -> bool:
    """Whether ``docstore`` is the JSON codec over exactly ``byte_store``."""
    return isinstance(docstore, DocumentCodecStore) and docstore.byte_store is byte_store


def _private(model: BaseModel) -> dict[str, Any]:
    """A model's private attributes, to read and set on the query path.

    ``model._name`` costs ~2 us (pydantic finds a private attribute after a
    failed lookup); a key of this dict, what ``model._name = value`` sets, costs
    a dict lookup. A query reads five.
    """
    private = model.__pydantic_private__
    if private is None:
        msg = f"{type(model).__name__} has no private attributes; was __init__ skipped?"
        raise RuntimeError(msg)
    return private


def _check_query(query: Any) -> None:
    if not isinstance(query, str):
        msg = f"A query must be a string; got {type(query).__name__} ({query!r:.60})."
        raise TypeError(msg)
    check_query(query)


def _one_line(err: ValidationError) -> str:
    """A pydantic error as one line per problem: ``field: what is wrong (got value)``."""
    parts = []
    for problem in err.errors():
        where = ".".join(str(p) for p in problem["loc"])
        what = str(problem["msg"]).removeprefix("Value error, ")
        got = "" if problem["type"] == "value_error" else f" (got {problem.get('input')!r:.60})"
        parts.append(f"{where}: {what}{got}" if where else what)
    return f"SmallToBigRetriever: {'; '.join(parts)}"
