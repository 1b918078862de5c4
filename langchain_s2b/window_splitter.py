"""The splitter that feeds :class:`~langchain_s2b.windows.SentenceWindowExpander`.

:class:`WindowSplitter` splits documents with any LangChain ``TextSplitter``,
stamps each chunk with its source id, ``split_id`` and ``split_idx_start`` (its
char offset in the source text), writes the chunks to a store in one ``mset``
and returns them for a BM25 or vector-store index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_core.stores import BaseStore
from langchain_text_splitters import TextSplitter

from langchain_s2b.keys import check_level_name
from langchain_s2b.splitting import locate_chunks
from langchain_s2b.windows import (
    CHUNK_LEVEL,
    SOURCE_SPLITS,
    SPLIT_IDX_START,
    SentenceWindowExpander,
    chunk_key,
    composite_source_id,
    describe,
    field_names,
    present,
)


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
            pieces = [piece for piece in self.splitter.split_text(text) if piece]
            spans = locate_chunks(text, pieces)
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
