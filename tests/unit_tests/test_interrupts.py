"""A write interrupted by a cancellation or Ctrl-C is all or nothing, like a failed one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import FaissIndex, SmallToBigRetriever

from ._embeddings import ExactWords

OLD = "Walrus tusks are long. The walrus lives in the Arctic."
NEW = "Penguins swim fast. The penguin lives in the south."


class Interrupting(InMemoryStore):
    """Writes manifests slowly (async) or raises ``KeyboardInterrupt`` before writing them."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = 0.0
        self.interrupt = False

    def mset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        if self.interrupt and any(k.endswith("/manifest") for k, _ in key_value_pairs):
            self.interrupt = False
            raise KeyboardInterrupt
        super().mset(key_value_pairs)

    async def amset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        if self.slow and any(k.endswith("/manifest") for k, _ in key_value_pairs):
            await asyncio.sleep(self.slow)  # the write lands after the caller gave up
        super().mset(key_value_pairs)


def retriever() -> tuple[SmallToBigRetriever, Interrupting]:
    store = Interrupting()
    r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), docstore=store, mode="window")
    r.add_documents([Document(page_content=OLD, id="z")])
    return r, store


def served(r: SmallToBigRetriever) -> list[str]:
    return [d.page_content for d in r.invoke("walrus penguin lives", k=4, window_size=0)]


def test_a_cancelled_async_update_keeps_the_old_version_whole() -> None:
    r, store = retriever()
    store.slow = 0.3

    async def cancelled() -> None:
        await asyncio.wait_for(r.aadd_documents([Document(page_content=NEW, id="z")]), 0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(cancelled())
    assert r.verify().ok
    assert served(r) == ["The walrus lives in the Arctic.", "Walrus tusks are long. "]
    store.slow = 0.0
    assert asyncio.run(r.adelete(["z"])) == ["z"]
    assert served(r) == []
    assert list(store.yield_keys()) == []
    assert r.verify().ok


def test_ctrl_c_during_an_update_keeps_the_old_version_whole() -> None:
    r, store = retriever()
    store.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        r.add_documents([Document(page_content=NEW, id="z")])
    assert r.verify().ok
    assert served(r) == ["The walrus lives in the Arctic.", "Walrus tusks are long. "]
    # and the update goes through once nothing interrupts it
    assert r.add_documents([Document(page_content=NEW, id="z")]).updated == ["z"]
    assert served(r) == ["The penguin lives in the south.", "Penguins swim fast. "]
    assert r.verify().ok


def test_a_cancelled_async_delete_keeps_the_source() -> None:
    r, store = retriever()
    original = store.amdelete

    async def slow_mdelete(keys: Sequence[str]) -> None:
        await asyncio.sleep(0.3)
        await original(keys)

    store.amdelete = slow_mdelete  # type: ignore[method-assign]

    async def cancelled() -> None:
        await asyncio.wait_for(r.adelete(["z"]), 0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(cancelled())
    assert r.verify().ok
    assert served(r) == ["The walrus lives in the Arctic.", "Walrus tusks are long. "]
