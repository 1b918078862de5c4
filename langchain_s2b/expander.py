r"""The sentence-window contract after any retriever: the expander and its splitter.

:class:`WindowSplitter` splits documents with any LangChain ``TextSplitter``,
stamps each chunk with its source id, ``split_id`` and ``split_idx_start``
(its char offset in the source text), writes the chunks to a store and returns
them for a BM25 or vector-store index. :class:`SentenceWindowExpander` runs
after any retriever over those chunks and grows each retrieved chunk by
``window_size`` neighbours on each side.

Chunk keys: ``<encoded-source-id>/<level>/<split_id>``, the same node-key scheme
as :class:`~langchain_s2b.SmallToBigRetriever` (``level`` is ``"chunk"`` by
default), so neighbours are found by computed keys in one batched ``mget`` for
all retrieved documents. Over a ``SmallToBigRetriever`` docstore, whose
sources move to a new generation when they are updated, each source's
manifest is read first (one more ``mget``) and names where its nodes are. A
composite source id (a list of metadata fields) is the fields' values joined
by ``|`` (a ``|`` or ``\\`` inside a value is escaped
with ``\\``). Pointing the expander at a ``SmallToBigRetriever`` docstore with
``level="sentence"`` expands that retriever's leaves as well.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from langchain_core.stores import BaseStore
from langchain_text_splitters import TextSplitter
from pydantic import ConfigDict, field_validator

from langchain_s2b.core.ingest import nodes_key
from langchain_s2b.core.keys import (
    check_level_name,
    composite_source_id,
    encode_source_key,
    manifest_key,
    node_key,
)
from langchain_s2b.core.merge import Chunk, merge_chunks
from langchain_s2b.core.tree import text_splitter_spans

CHUNK_LEVEL = "chunk"
SPLIT_IDX_START = "split_idx_start"
SOURCE_SPLITS = "source_splits"
"""Chunk metadata: how many chunks the source has (tells a deleted tail from the end)."""


# Pure helpers ----------------------------------------------------------------


def check_window_size(window_size: Any) -> int:
    """Return ``window_size`` if it is an integer >= 0, else raise ``ValueError``."""
    if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 0:
        msg = (
            "window_size must be an integer >= 0 (the number of neighbouring chunks "
            f"taken on each side of a retrieved chunk; 0 returns the chunk alone); "
            f"got {window_size!r}."
        )
        raise ValueError(msg)
    return window_size


def field_names(value: str | Sequence[str]) -> tuple[str, ...]:
    """The source id field name(s) as a tuple; reject empty names."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(name, str) and name for name in names):
        msg = f"source_id_meta_field must be a field name or a non-empty list; got {value!r}."
        raise ValueError(msg)
    return names


def present(metadata: Mapping[str, Any], name: str) -> bool:
    """Whether ``metadata`` has a non-empty value under ``name``."""
    return metadata.get(name) not in (None, "")


def chunk_key(source_id: str, split_id: int, level: str = CHUNK_LEVEL) -> str:
    """The store key of chunk ``split_id`` of source ``source_id``."""
    return node_key(encode_source_key(source_id), level, split_id)


def describe(doc: Document) -> str:
    """How an error message names a document."""
    return f"id={doc.id!r}" if doc.id else repr(doc.page_content[:40])


def _as_int(value: Any, name: str, doc: Document) -> int:
    ok = isinstance(value, int | str) and not isinstance(value, bool) and str(value).isdecimal()
    if not ok:
        msg = f"Document {describe(doc)} has {name}={value!r}; it must be an integer >= 0."
        raise ValueError(msg)
    return int(value)


def _int_field(docs: Sequence[Document], name: str) -> int | None:
    """The first integer value of metadata field ``name`` among ``docs``."""
    for doc in docs:
        value = doc.metadata.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# Planning and assembly (shared by the sync and async paths) ------------------


@dataclass
class _Request:
    """One retrieved chunk, the split ids of its window and, once located, their keys."""

    doc: Document
    source_id: str
    split_id: int
    ids: range
    keys: dict[int, str] = field(default_factory=dict)


@dataclass
class Window:
    """One retrieved document's window: its chunks, merged text and metadata."""

    hit: Document
    chunks: list[Document]
    """The window's chunks, ordered by split id (just ``[hit]`` when passed through)."""
    text: str
    metadata: dict[str, Any] | None = None
    """``None`` when the retrieved document was passed through unchanged."""

    def document(self) -> Document:
        """The window as a ``Document`` (the retrieved document itself if passed through)."""
        if self.metadata is None:
            return self.hit
        return Document(page_content=self.text, metadata=self.metadata)


@dataclass
class _Plan:
    """Every retrieved document's window request (or the document, to pass through)."""

    items: list[_Request | Document]
    window_size: int
    separator: str
    level: str
    manifests: list[str] = field(init=False)
    """The manifest key of each source (a ``SmallToBigRetriever`` docstore has them)."""
    keys: list[str] = field(init=False, default_factory=list)
    """Every chunk key to fetch, once (after :meth:`locate`)."""

    def __post_init__(self) -> None:
        sources = dict.fromkeys(req.source_id for req in self._requests())
        self.manifests = [manifest_key(encode_source_key(sid)) for sid in sources]

    def _requests(self) -> list[_Request]:
        return [item for item in self.items if isinstance(item, _Request)]

    def locate(self, manifests: Sequence[Document | None]) -> list[str]:
        """The chunk keys, under the generation each source's manifest names (else 0)."""
        found = dict(zip(self.manifests, manifests, strict=True))
        prefix: dict[str, str] = {}
        for req in self._requests():
            if req.source_id not in prefix:
                key = encode_source_key(req.source_id)
                prefix[req.source_id] = _generation_key(key, found.get(manifest_key(key)))
            req.keys = {i: node_key(prefix[req.source_id], self.level, i) for i in req.ids}
        requests = self._requests()
        self.keys = list(dict.fromkeys(key for req in requests for key in req.keys.values()))
        return self.keys

    def assemble(self, values: Sequence[Document | None]) -> list[Window]:
        """Build the windows from the fetched values (in ``keys`` order)."""
        fetched = dict(zip(self.keys, values, strict=True))
        return [
            _window(item, fetched, self.window_size, self.separator)
            if isinstance(item, _Request)
            else Window(item, [item], item.page_content)
            for item in self.items
        ]


def _window(
    req: _Request, fetched: Mapping[str, Document | None], window_size: int, separator: str
) -> Window:
    """Grow one hit over its fetched neighbours; stop at the first gap on each side."""
    found = {i: doc for i, key in req.keys.items() if (doc := fetched.get(key)) is not None}
    found.setdefault(req.split_id, req.doc)
    n_splits = _int_field([req.doc, *found.values()], SOURCE_SPLITS)
    # Without a chunk count, ids after the last chunk found are taken to be past the end.
    last = n_splits - 1 if n_splits is not None else max(found)
    wanted = [i for i in req.keys if i <= last]
    missing = [i for i in wanted if i not in found]
    lo = hi = req.split_id
    while lo - 1 in req.keys and lo - 1 in found:
        lo -= 1
    while hi + 1 in req.keys and hi + 1 <= last and hi + 1 in found:
        hi += 1
    chunks = [found[i] for i in range(lo, hi + 1)]
    meta = dict(req.doc.metadata)
    meta.setdefault("source_id", req.source_id)
    meta.update(
        split_ids=list(range(lo, hi + 1)), missing_split_ids=missing, window_size=window_size
    )
    offsets = [_int_field([doc], SPLIT_IDX_START) for doc in chunks]
    if all(start is not None for start in offsets):
        pieces = [
            Chunk(start, start + len(doc.page_content), doc.page_content, split_id)
            for split_id, start, doc in zip(range(lo, hi + 1), offsets, chunks, strict=True)
            if start is not None
        ]
        merged = merge_chunks(pieces)
        meta.update(start=merged.start, end=merged.end, gaps=[list(gap) for gap in merged.gaps])
        return Window(req.doc, chunks, merged.text, meta)
    for name in ("start", "end", "gaps"):
        meta.pop(name, None)
    return Window(req.doc, chunks, separator.join(doc.page_content for doc in chunks), meta)


def _generation_key(source_key: str, manifest: Document | None) -> str:
    """Where a source's current nodes live: its manifest's generation, else generation 0."""
    if manifest is None:
        return source_key
    try:
        return nodes_key(manifest)
    except (KeyError, TypeError, ValueError):  # not a manifest of ours: chunks of a splitter
        return source_key


# The expander ----------------------------------------------------------------


class SentenceWindowExpander(RunnableSerializable[list[Document], list[Document]]):
    """Grow retrieved chunks into windows of their neighbours: the sentence-window contract.

    Runs after any retriever (BM25, a vector-store retriever ...) whose
    documents carry a source id and a ``split_id``, over a store that holds the
    chunks under computed keys (see :class:`WindowSplitter`). All neighbours of
    all retrieved documents are fetched in one batched ``mget`` (after one of the
    sources' manifests, which a ``SmallToBigRetriever`` docstore keeps).

    Setup:
        .. code-block:: bash

            pip install -e .  # in a clone of the repository (not on PyPI)

    Key init args:
        store: a ``BaseStore[str, Document]`` of chunks; wrap a byte store
            (``LocalFileStore``, ``RedisStore`` ...) in ``DocumentCodecStore``.
        window_size: neighbours on each side of a retrieved chunk (default 3).
        source_id_meta_field: the field naming a chunk's source; a list of
            fields makes a composite key.
        split_id_meta_field: the field holding a chunk's ordinal in its source.
        raise_on_missing_meta_fields: raise ``ValueError`` for a retrieved
            document without those fields, or pass it through unchanged.

    Instantiate:
        .. code-block:: python

            from langchain_core.stores import InMemoryStore
            from langchain_s2b.expander import SentenceWindowExpander, WindowSplitter

            store = InMemoryStore()
            chunks = WindowSplitter(text_splitter, store).split_documents(docs)
            expander = SentenceWindowExpander(store=store, window_size=3)

    Use within a chain:
        .. code-block:: python

            chain = BM25Retriever.from_documents(chunks, k=1) | expander
            windows = chain.invoke("third")
            expander.invoke(retrieved_docs, window_size=1)  # per call
            expander.run(retrieved_docs)["context_windows"]  # Haystack's outputs

    Each window is the exact source text from its first chunk's start to its
    last chunk's end when every chunk has ``split_idx_start`` (overlapping,
    contained, repeated chunks merge without duplicated characters);
    otherwise the chunks are joined with ``separator`` in ``split_id`` order.
    A neighbour missing from the store ends the window on that side; its id
    is listed in the window's ``missing_split_ids``. Metadata: the retrieved
    document's own (its ``score`` too), plus ``source_id``, ``split_ids``,
    ``missing_split_ids``, ``window_size`` and, with offsets, ``start``,
    ``end`` (``[start, end)`` in the source) and ``gaps`` (char ranges no chunk
    covered, filled with one space).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: BaseStore[str, Document]
    """The chunks, under ``<encoded-source-id>/<level>/<split_id>``."""
    window_size: int = 3
    """Neighbouring chunks taken on each side of a retrieved chunk."""
    source_id_meta_field: str | list[str] = "source_id"
    """Metadata field(s) naming a chunk's source; a list makes a composite key."""
    split_id_meta_field: str = "split_id"
    """Metadata field holding a chunk's ordinal in its source (0, 1, 2 ...)."""
    raise_on_missing_meta_fields: bool = True
    """Raise for a document without those fields, or pass it through unchanged."""
    level: str = CHUNK_LEVEL
    """The level part of chunk keys (``"sentence"`` for a ``SmallToBigRetriever`` docstore)."""
    separator: str = " "
    """Joins chunks that have no ``split_idx_start`` offsets."""

    @field_validator("window_size", mode="before")
    @classmethod
    def _check_window_size(cls, value: Any) -> int:
        return check_window_size(value)

    @field_validator("source_id_meta_field")
    @classmethod
    def _check_source_fields(cls, value: str | list[str]) -> str | list[str]:
        field_names(value)
        return value

    @field_validator("level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        return check_level_name(value)

    # Public API --------------------------------------------------------------

    def invoke(
        self, input: list[Document], config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """One window ``Document`` per retrieved document, in input order.

        Args:
            input: retrieved documents (a retriever's output).
            config: the usual ``RunnableConfig`` (callbacks, tags ...).
            **kwargs: per-call options: ``window_size``.
        """
        return self._call_with_config(self._expand, input, config, **kwargs)

    async def ainvoke(
        self, input: list[Document], config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        """Async :meth:`invoke` (the store's ``amget``)."""
        return await self._acall_with_config(self._aexpand, input, config, **kwargs)

    def run(self, documents: Sequence[Document], window_size: int | None = None) -> dict[str, Any]:
        """Haystack's outputs: ``context_windows`` and ``context_documents``.

        Args:
            documents: retrieved documents.
            window_size: overrides the constructor's ``window_size`` for this call.

        Returns:
            ``{"context_windows": [str, ...], "context_documents": [[Document, ...], ...]}``:
            one merged string and one ``split_id``-ordered list of chunks per
            retrieved document, in input order.
        """
        return _outputs(self._windows(documents, window_size))

    async def arun(
        self, documents: Sequence[Document], window_size: int | None = None
    ) -> dict[str, Any]:
        """Async :meth:`run` (the store's ``amget``)."""
        return _outputs(await self._awindows(documents, window_size))

    # Internals: the sync and async twins differ only at the mget line --------

    def _windows(self, documents: Sequence[Document], window_size: int | None) -> list[Window]:
        plan = self._plan(documents, window_size)
        keys = plan.locate(self.store.mget(plan.manifests) if plan.manifests else [])
        return plan.assemble(self.store.mget(keys) if keys else [])

    async def _awindows(
        self, documents: Sequence[Document], window_size: int | None
    ) -> list[Window]:
        plan = self._plan(documents, window_size)
        keys = plan.locate(await self.store.amget(plan.manifests) if plan.manifests else [])
        return plan.assemble(await self.store.amget(keys) if keys else [])

    def _expand(self, documents: Sequence[Document], **kwargs: Any) -> list[Document]:
        return [window.document() for window in self._windows(documents, _window_option(kwargs))]

    async def _aexpand(self, documents: Sequence[Document], **kwargs: Any) -> list[Document]:
        windows = await self._awindows(documents, _window_option(kwargs))
        return [window.document() for window in windows]

    def _plan(self, documents: Sequence[Document], window_size: int | None = None) -> _Plan:
        size = self.window_size if window_size is None else check_window_size(window_size)
        if isinstance(documents, str | Document) or not isinstance(documents, Sequence):
            msg = (
                "SentenceWindowExpander expects a list of Documents (a retriever's "
                f"output); got {type(documents).__name__}."
            )
            raise TypeError(msg)
        items = [self._request(doc, size) for doc in documents]
        return _Plan(items, size, self.separator, self.level)

    def _request(self, doc: Document, size: int) -> _Request | Document:
        if not isinstance(doc, Document):
            msg = f"SentenceWindowExpander expects Documents; got {type(doc).__name__}."
            raise TypeError(msg)
        fields = field_names(self.source_id_meta_field)
        names = [*fields, self.split_id_meta_field]
        missing = [name for name in names if not present(doc.metadata, name)]
        if missing:
            if not self.raise_on_missing_meta_fields:
                return doc
            msg = (
                f"Document {describe(doc)} lacks the metadata field(s) {missing} "
                f"(source_id_meta_field={self.source_id_meta_field!r}, "
                f"split_id_meta_field={self.split_id_meta_field!r}). Split with "
                "WindowSplitter, or pass raise_on_missing_meta_fields=False to pass "
                "such documents through unchanged."
            )
            raise ValueError(msg)
        source_id = composite_source_id(doc.metadata, fields)
        split_id = _as_int(doc.metadata[self.split_id_meta_field], self.split_id_meta_field, doc)
        hi = split_id + size
        n_splits = _int_field([doc], SOURCE_SPLITS)
        if n_splits is not None:
            hi = min(hi, n_splits - 1)
        ids = range(max(0, split_id - size), max(hi, split_id) + 1)
        return _Request(doc, source_id, split_id, ids)


def _window_option(kwargs: Mapping[str, Any]) -> int | None:
    unknown = sorted(set(kwargs) - {"window_size"})
    if unknown:
        msg = f"Unknown option(s) {unknown} for SentenceWindowExpander; allowed: ['window_size']."
        raise ValueError(msg)
    value: int | None = kwargs.get("window_size")
    return value


def _outputs(windows: Sequence[Window]) -> dict[str, Any]:
    return {
        "context_windows": [window.text for window in windows],
        "context_documents": [list(window.chunks) for window in windows],
    }


# The splitter that feeds it ---------------------------------------------------


class WindowSplitter(BaseDocumentTransformer):
    """Split with any ``TextSplitter``, stamp window metadata, store the chunks.

    Each chunk gets the source id (under ``source_id_meta_field``), its
    ``split_id`` (0, 1, 2 ... per source), ``split_idx_start`` (its char offset
    in the source text), ``source_splits`` (the source's chunk count) and, as
    its ``Document.id``, its store key. The chunks are written to ``store`` in
    one ``mset`` and returned, to be indexed in BM25 or a vector store.

    A source's id is its ``source_id_meta_field`` value(s); with a single
    field that is absent, ``Document.id`` or else a hash of the text is used
    and stamped into that field. Re-splitting a source overwrites its keys;
    chunks left over from a longer old version are never read, because
    windows stop at ``source_splits``.

    Example:
        .. code-block:: python

            splitter = WindowSplitter(RecursiveCharacterTextSplitter(chunk_size=200), store)
            chunks = splitter.split_documents(docs)
            chain = BM25Retriever.from_documents(chunks) | splitter.expander(window_size=2)
    """

    def __init__(
        self,
        splitter: TextSplitter,
        store: BaseStore[str, Document],
        *,
        source_id_meta_field: str | list[str] = "source_id",
        split_id_meta_field: str = "split_id",
        level: str = CHUNK_LEVEL,
    ) -> None:
        if not isinstance(splitter, TextSplitter):
            msg = f"splitter must be a LangChain TextSplitter; got {type(splitter).__name__}."
            raise TypeError(msg)
        self.splitter = splitter
        self.store = store
        self.source_id_meta_field = source_id_meta_field
        self.split_id_meta_field = split_id_meta_field
        self.level = check_level_name(level)
        self._fields = field_names(source_id_meta_field)

    def split_documents(self, documents: Sequence[Document]) -> list[Document]:
        """Split, stamp and store; returns the chunks."""
        chunks = self._chunks(documents)
        if chunks:
            self.store.mset([(str(chunk.id), chunk) for chunk in chunks])
        return chunks

    async def asplit_documents(self, documents: Sequence[Document]) -> list[Document]:
        """Async :meth:`split_documents` (the store's ``amset``)."""
        chunks = self._chunks(documents)
        if chunks:
            await self.store.amset([(str(chunk.id), chunk) for chunk in chunks])
        return chunks

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> list[Document]:
        """Same as :meth:`split_documents` (the ``BaseDocumentTransformer`` interface)."""
        return self.split_documents(documents)

    async def atransform_documents(
        self, documents: Sequence[Document], **kwargs: Any
    ) -> list[Document]:
        """Same as :meth:`asplit_documents`."""
        return await self.asplit_documents(documents)

    def expander(self, **kwargs: Any) -> SentenceWindowExpander:
        """A :class:`SentenceWindowExpander` over the same store and fields."""
        settings: dict[str, Any] = {
            "store": self.store,
            "source_id_meta_field": self.source_id_meta_field,
            "split_id_meta_field": self.split_id_meta_field,
            "level": self.level,
        }
        return SentenceWindowExpander(**{**settings, **kwargs})

    def _chunks(self, documents: Sequence[Document]) -> list[Document]:
        out: list[Document] = []
        seen: set[str] = set()
        for doc in documents:
            source_id, meta = self._identify(doc)
            if source_id in seen:
                msg = (
                    f"Source id {source_id!r} appears twice in one call; their chunks "
                    "would overwrite each other. Give each source a distinct id."
                )
                raise ValueError(msg)
            seen.add(source_id)
            text = doc.page_content
            spans = text_splitter_spans(self.splitter, text)
            for split_id, (start, end) in enumerate(spans):
                chunk_meta = {
                    **meta,
                    self.split_id_meta_field: split_id,
                    SPLIT_IDX_START: start,
                    SOURCE_SPLITS: len(spans),
                }
                key = chunk_key(source_id, split_id, self.level)
                out.append(Document(page_content=text[start:end], metadata=chunk_meta, id=key))
        return out

    def _identify(self, doc: Document) -> tuple[str, dict[str, Any]]:
        meta = dict(doc.metadata)
        missing = [name for name in self._fields if not present(meta, name)]
        if not missing:
            return composite_source_id(meta, self._fields), meta
        if len(self._fields) > 1:
            msg = (
                f"Document {describe(doc)} lacks the source id field(s) {missing} "
                f"of the composite key {list(self._fields)}; add them to its metadata."
            )
            raise ValueError(msg)
        digest = hashlib.sha256(doc.page_content.encode("utf-8", "surrogatepass")).hexdigest()
        source_id = doc.id or f"sha256-{digest[:32]}"
        meta[self._fields[0]] = source_id
        return source_id, meta
