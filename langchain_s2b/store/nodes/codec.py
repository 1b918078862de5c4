"""The docstore codec: documents in any byte store as plain JSON, never pickle.

``BaseStore`` is batch-only (``mget``/``mset``/``mdelete``/``yield_keys``). A
byte store (``InMemoryByteStore``, ``LocalFileStore``, ``RedisStore``,
``SQLStore``) holds parents through :class:`DocumentCodecStore`: plain JSON,
never pickle, so reading a store can not run code.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.runnables.config import run_in_executor
from langchain_core.stores import BaseStore

CODEC_VERSION = 1


def encode_document(doc: Document) -> bytes:
    """Serialise a document to JSON bytes (ASCII; surrogates survive)."""
    payload = {"v": CODEC_VERSION, "id": doc.id, "page_content": doc.page_content}
    try:
        payload["metadata"] = json.loads(json.dumps(doc.metadata, allow_nan=False))
        return json.dumps(payload, ensure_ascii=True, allow_nan=False).encode("ascii")
    except (TypeError, ValueError) as err:
        msg = (
            "Document metadata must be JSON-serialisable (str, int, float, bool, None, "
            f"lists and dicts of them) to be stored safely; {err}. Metadata keys: "
            f"{sorted(doc.metadata)}."
        )
        raise ValueError(msg) from None


def decode_document(data: bytes, key: str = "?") -> Document:
    """Parse bytes written by :func:`encode_document`; reject anything else."""
    payload = check_document(data, key)
    return Document(
        page_content=payload["page_content"], metadata=payload["metadata"], id=payload.get("id")
    )


def check_document(data: bytes, key: str = "?") -> dict[str, Any]:
    """The checked JSON of a document written by :func:`encode_document` (no ``Document`` made)."""
    try:
        payload = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        msg = f"Stored value for key {key!r} is not a JSON document ({err})."
        raise ValueError(msg) from None
    ok = (
        isinstance(payload, dict)
        and payload.get("v") == CODEC_VERSION
        and isinstance(payload.get("page_content"), str)
        and isinstance(payload.get("metadata"), dict)
        and isinstance(payload.get("id"), str | None)
    )
    if not ok:
        msg = (
            f"Stored value for key {key!r} is not a langchain_s2b document "
            f"(codec version {CODEC_VERSION}): {data[:80]!s}."
        )
        raise ValueError(msg)
    return dict(payload)


def _decode_all(keys: Sequence[str], values: Sequence[bytes | None]) -> list[Document | None]:
    return [None if v is None else decode_document(v, k) for k, v in zip(keys, values, strict=True)]


def _side(store: Any) -> bool | None:
    """``SQLStore.async_mode``: True when async-only, False when sync-only."""
    mode = getattr(store, "async_mode", None)
    return mode if isinstance(mode, bool) else None


class DocumentCodecStore(BaseStore[str, Document]):
    """A ``BaseStore[str, Document]`` over any byte store, through JSON.

    Sync calls go to the byte store's sync methods and async calls to its async
    ones. A store built for one side only (``SQLStore`` on a sync or an async
    engine) works from the other side too when it is sync-only (its methods run
    in a worker thread); an async-only store used synchronously is a clear error.
    """

    def __init__(self, byte_store: BaseStore[str, bytes]) -> None:
        self.byte_store = byte_store

    def _check_sync(self) -> None:
        if _side(self.byte_store) is True:
            msg = (
                f"{type(self.byte_store).__name__} was built on an async engine and has no "
                "sync methods; use ainvoke/aadd_documents/adelete/averify or build it on a "
                "sync engine."
            )
            raise ValueError(msg)

    async def _acall(self, name: str, *args: Any) -> Any:
        if _side(self.byte_store) is False:
            return await run_in_executor(None, getattr(self.byte_store, name[1:]), *args)
        return await getattr(self.byte_store, name)(*args)

    def mget(self, keys: Sequence[str]) -> list[Document | None]:
        """Fetch and decode documents."""
        self._check_sync()
        return _decode_all(keys, self.byte_store.mget(keys))

    async def amget(self, keys: Sequence[str]) -> list[Document | None]:
        """Fetch and decode documents, asynchronously."""
        return _decode_all(keys, await self._acall("amget", keys))

    def mset(self, key_value_pairs: Sequence[tuple[str, Document]]) -> None:
        """Encode and store documents."""
        self._check_sync()
        self.byte_store.mset([(k, encode_document(d)) for k, d in key_value_pairs])

    async def amset(self, key_value_pairs: Sequence[tuple[str, Document]]) -> None:
        """Encode and store documents, asynchronously."""
        await self._acall("amset", [(k, encode_document(d)) for k, d in key_value_pairs])

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete keys."""
        self._check_sync()
        self.byte_store.mdelete(keys)

    async def amdelete(self, keys: Sequence[str]) -> None:
        """Delete keys, asynchronously."""
        await self._acall("amdelete", keys)

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Iterate over keys (with an optional prefix)."""
        self._check_sync()
        yield from self.byte_store.yield_keys(prefix=prefix)

    async def ayield_keys(self, *, prefix: str | None = None) -> AsyncIterator[str]:
        """Iterate over keys asynchronously."""
        if _side(self.byte_store) is False:
            keys = await run_in_executor(
                None, lambda: list(self.byte_store.yield_keys(prefix=prefix))
            )
            for key in keys:
                yield key
            return
        async for key in self.byte_store.ayield_keys(prefix=prefix):
            yield key
