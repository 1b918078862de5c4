"""The write path of ``ChildIndex``: embed the leaves, add and delete, all or nothing.

``FaissIndex`` undoes its own steps; another store has the new keys of a failed
add removed again, and the leaves a failed delete took added again (read with
``get_by_ids`` before, embedded again by the store), before the error or
interrupt goes on up.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor

from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.requests import ChildDamage
from langchain_s2b.store.base import undone, warn_undo
from langchain_s2b.store.children.child_base import (
    ChildBase,
    Vectors,
    _embeddings_call,
    _float_lists,
)


class ChildWrites(ChildBase):
    """The write path of :class:`~langchain_s2b.store.children.child_index.ChildIndex`."""

    def embed_leaves(self, texts: list[str]) -> list[list[float]] | None:
        """Leaf vectors, embedded ahead of the write (``None``: the store embeds on add).

        The model's vectors are converted to float32 once, here: the rows
        returned are views of one matrix, which :meth:`add` stacks again
        without going through Python floats.
        """
        emb = self.embeddings
        if emb is None or not self._takes_vectors():
            return None
        return _rows(emb.embed_documents(texts), len(texts))

    async def aembed_leaves(self, texts: list[str]) -> list[list[float]] | None:
        """Async :meth:`embed_leaves`."""
        emb = self.embeddings
        if emb is None or not self._takes_vectors():
            return None
        return _rows(await emb.aembed_documents(texts), len(texts))

    def add(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Index leaves under their ids (new keys: a generation's), with their vectors if given.

        All or nothing: ``FaissIndex`` undoes its own steps; another store has
        the new keys removed again when its add fails or is interrupted.
        """
        if not leaves:
            return
        ids = [str(d.id) for d in leaves]
        if self.faiss is not None:
            texts = [d.page_content for d in leaves]
            matrix = np.asarray(vectors, dtype=np.float32) if vectors is not None else None
            if matrix is None:
                self.faiss.add_texts(texts, [d.metadata for d in leaves], ids=ids)
            else:
                self.faiss.add_vectors(matrix, texts, [d.metadata for d in leaves], ids)
            return
        try:
            self._add_other(leaves, vectors, ids)
        except BaseException as err:
            try:
                self._delete_keys(ids)
            except Exception as undo_err:
                warn_undo(err, undo_err)
            raise

    def _add_other(self, leaves: list[Document], vectors: Vectors, ids: list[str]) -> None:
        if vectors is None:
            self._check_embeds_notes(leaves)
            self.vectorstore.add_documents(leaves, ids=ids)
            return
        store: Any = self.vectorstore
        call = _embeddings_call(store, "add_embeddings")
        store.add_embeddings(*_embeddings_args(call, leaves, vectors), ids=ids)

    async def aadd(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Async :meth:`add`: the store's ``aadd_embeddings`` if it has one, else a thread."""
        if not leaves:
            return
        ids = [str(d.id) for d in leaves]
        if self.faiss is not None:
            await run_in_executor(None, self.add, leaves, vectors)
            return
        try:
            await self._aadd_other(leaves, vectors, ids)
        except BaseException as err:
            await undone(err, lambda: self._adelete_keys(ids))
            raise

    async def _aadd_other(self, leaves: list[Document], vectors: Vectors, ids: list[str]) -> None:
        if vectors is None:
            self._check_embeds_notes(leaves)
            await self.vectorstore.aadd_documents(leaves, ids=ids)
            return
        call = _embeddings_call(self.vectorstore, "aadd_embeddings")
        if call:
            store: Any = self.vectorstore
            await store.aadd_embeddings(*_embeddings_args(call, leaves, vectors), ids=ids)
        else:
            await run_in_executor(None, self._add_other, leaves, vectors, ids)

    def _check_embeds_notes(self, leaves: list[Document]) -> None:
        """Refuse leaves with a header or context for a store that embeds ``page_content`` itself.

        Such a store (no ``add_embeddings``, no embedding model of its own to ask)
        would embed the leaf's text alone; the command line's store embeds what
        :func:`~langchain_s2b.core.headers.embedded_text` gives (``embeds_on_add``).
        """
        if getattr(self.vectorstore, "embeds_on_add", False):
            return
        if any(embedded_text(d.page_content, d.metadata) != d.page_content for d in leaves):
            msg = (
                f"{type(self.vectorstore).__name__} embeds each leaf's page_content itself, so "
                "it can not embed a contextual header or context beside it; use FaissIndex or "
                "a store with add_embeddings, or pass contextual_headers=False and no "
                "context_model."
            )
            raise ValueError(msg)

    def delete(self, keys: list[str]) -> None:
        """Delete leaves; keys the store does not hold are ignored.

        All or nothing: ``FaissIndex`` undoes its own steps; another store is
        asked for the leaves first (``get_by_ids``), and those it lost are
        added again (embedded again by the store) when the delete fails or is
        interrupted.
        """
        if not keys:
            return
        if self.faiss is not None:
            self.faiss.delete(keys)
            return
        held = self._held(keys)
        try:
            self._delete_keys(keys)
        except BaseException as err:
            try:
                self._put_back(keys, held)
            except Exception as undo_err:
                warn_undo(err, undo_err)
            raise

    def _delete_keys(self, keys: list[str]) -> None:
        try:
            self.vectorstore.delete(keys)
        except (ValueError, KeyError):
            for key in keys:
                try:
                    self.vectorstore.delete([key])
                except (ValueError, KeyError):
                    continue

    def _held(self, keys: list[str]) -> list[Document]:
        """The leaves among ``keys`` the store holds (``[]`` when it can not say)."""
        try:
            return list(self.vectorstore.get_by_ids(keys))
        except NotImplementedError:
            return []

    def _put_back(self, keys: list[str], held: list[Document]) -> None:
        if not held:
            return
        still = {str(doc.id) for doc in self._held(keys)}
        lost = [doc for doc in held if str(doc.id) not in still]
        if lost:
            self.vectorstore.add_documents(lost, ids=[str(doc.id) for doc in lost])

    async def adelete(self, keys: list[str]) -> None:
        """Async :meth:`delete` (through the store's ``adelete``: async-only stores work)."""
        if not keys:
            return
        if self.faiss is not None:
            await run_in_executor(None, self.faiss.delete, keys)
            return
        held = await self._aheld(keys)
        try:
            await self._adelete_keys(keys)
        except BaseException as err:
            await undone(err, lambda: self._aput_back(keys, held))
            raise

    async def _adelete_keys(self, keys: list[str]) -> None:
        try:
            await self.vectorstore.adelete(keys)
        except (ValueError, KeyError):
            for key in keys:
                try:
                    await self.vectorstore.adelete([key])
                except (ValueError, KeyError):
                    continue

    async def _aheld(self, keys: list[str]) -> list[Document]:
        try:
            return list(await self.vectorstore.aget_by_ids(keys))
        except NotImplementedError:
            return []

    async def _aput_back(self, keys: list[str], held: list[Document]) -> None:
        if not held:
            return
        still = {str(doc.id) for doc in await self._aheld(keys)}
        lost = [doc for doc in held if str(doc.id) not in still]
        if lost:
            await self.vectorstore.aadd_documents(lost, ids=[str(doc.id) for doc in lost])

    def damage(self) -> ChildDamage | None:
        """Where the index's records and vectors disagree (``None``: a store that can not say)."""
        return None if self.faiss is None else self.faiss.damage()

    def mend(self) -> None:
        """Make the index's records and vectors agree (``verify(repair=True)``)."""
        if self.faiss is not None:
            self.faiss.mend()


def _rows(vectors: Any, n: int) -> list[list[float]]:
    """The model's vectors as the rows of one float32 matrix (one conversion)."""
    if len(vectors) != n:
        msg = f"The embedding returned {len(vectors)} vectors for {n} texts."
        raise ValueError(msg)
    try:
        dim = len(vectors[0]) if n and isinstance(vectors, list) else -1
        matrix: np.ndarray
        if dim > 0 and all(isinstance(v, list) and len(v) == dim for v in vectors):
            matrix = _float_lists(vectors, n, dim)
        else:
            matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        matrix = np.empty((0,), dtype=np.float32)
    if matrix.ndim != 2:
        msg = f"The embedding returned {n} vectors that are not numbers of one length each."
        raise ValueError(msg)
    return list(matrix)


def _embeddings_args(
    call: str, leaves: list[Document], vectors: list[list[float]]
) -> tuple[Any, ...]:
    texts = [d.page_content for d in leaves]
    metadatas = [d.metadata for d in leaves]
    lists = [np.asarray(v, dtype=float).tolist() for v in vectors]  # float32 rows -> floats
    if call == "pairs":
        return list(zip(texts, lists, strict=True)), metadatas
    return texts, lists, metadatas
