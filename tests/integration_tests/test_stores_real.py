"""The retriever's promises on real parent stores, sync and async.

Files (``LocalFileStore``), SQLite and PostgreSQL (``SQLStore``; a sync engine
is used from sync code, an async engine from async code) and Redis
(``RedisStore``, sync only: its async side runs in threads). PostgreSQL and
Redis are real servers that ``.ci/servers.sh`` starts on loopback; without
them these tests are skipped locally and fail in CI (``tests/conftest.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from langchain_classic.storage import LocalFileStore
from langchain_community.storage import RedisStore, SQLStore
from langchain_core.documents import Document
from langchain_core.stores import BaseStore
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.keys import encode_source_key, manifest_key
from langchain_s2b.core.splitters import section_splitter, size_splitter

from ..unit_tests._embeddings import BagOfWords

CORPUS = {
    "rollo": "# Rollo\n\nRollo was a Viking leader. He founded Normandy.\n\n"
    "His descendants ruled England after 1066.",
    "paris/notes 1": "# Paris\n\nParis is the capital of France. The Seine runs through it.\n\n"
    "Notre-Dame stands on an island.",
    "..": "Dots as an id. They must stay inside the store.",
}
QUERY = "Viking leader founded Normandy"


def make(store: BaseStore[str, bytes]) -> SmallToBigRetriever:
    return SmallToBigRetriever(
        vectorstore=FaissIndex(BagOfWords()),
        byte_store=store,
        child_splitter=size_splitter(6),
        parent_splitter=section_splitter(20),
        k=2,
    )


def docs(texts: dict[str, str]) -> list[Document]:
    return [Document(text, id=sid, metadata={"title": sid}) for sid, text in texts.items()]


def owned_keys(r: SmallToBigRetriever, manifests: list[Document | None]) -> set[str]:
    from langchain_s2b.core.ingest import manifest_keys

    return {k for m in manifests if m is not None for k in manifest_keys(m)}


def check_results(results: list[Document], mode: str) -> None:
    assert results
    assert results[0].metadata["source_id"] == "rollo"
    assert results[0].metadata["mode"] == mode
    for doc in results:
        text = CORPUS[doc.metadata["source_id"]]
        assert doc.page_content == text[doc.metadata["start"] : doc.metadata["end"]]


# One scenario, written once; the two drivers differ only at the I/O calls. ------------


def scenario_sync(store: BaseStore[str, bytes], index_dir: Path) -> None:
    r = make(store)
    assert sorted(r.add_documents(docs(CORPUS)).added) == sorted(CORPUS)
    check_results(r.invoke(QUERY), "parent")
    check_results(r.invoke(QUERY, mode="window", window_size=1), "window")
    assert sorted(r.add_documents(docs(CORPUS)).unchanged) == sorted(CORPUS)
    changed = {**CORPUS, "rollo": "Rollo, a Viking leader, founded Normandy."}
    assert r.add_documents(docs(changed)).updated == ["rollo"]
    manifests = r.docstore.mget([manifest_key(encode_source_key(s)) for s in CORPUS])
    assert set(r.docstore.yield_keys()) == owned_keys(r, manifests)
    assert r.verify().ok
    # the index saved and loaded again over the same store (as a new process would)
    r.save(index_dir)
    again = SmallToBigRetriever.load(index_dir, BagOfWords(), byte_store=store)
    assert [d.page_content for d in again.invoke(QUERY)] == [
        d.page_content for d in r.invoke(QUERY)
    ]
    assert sorted(r.delete([*CORPUS, "unknown"])) == sorted(CORPUS)
    assert list(r.docstore.yield_keys()) == []
    assert r.invoke(QUERY) == []


async def scenario_async(store: BaseStore[str, bytes], index_dir: Path) -> None:
    r = make(store)
    assert sorted((await r.aadd_documents(docs(CORPUS))).added) == sorted(CORPUS)
    check_results(await r.ainvoke(QUERY), "parent")
    check_results(await r.ainvoke(QUERY, mode="window", window_size=1), "window")
    assert sorted((await r.aadd_documents(docs(CORPUS))).unchanged) == sorted(CORPUS)
    changed = {**CORPUS, "rollo": "Rollo, a Viking leader, founded Normandy."}
    assert (await r.aadd_documents(docs(changed))).updated == ["rollo"]
    manifests = await r.docstore.amget([manifest_key(encode_source_key(s)) for s in CORPUS])
    assert {k async for k in r.docstore.ayield_keys()} == owned_keys(r, manifests)
    assert (await r.averify()).ok
    r.save(index_dir)
    again = SmallToBigRetriever.load(index_dir, BagOfWords(), byte_store=store)
    expected = [d.page_content for d in await r.ainvoke(QUERY)]
    assert [d.page_content for d in await again.ainvoke(QUERY)] == expected
    assert sorted(await r.adelete([*CORPUS, "unknown"])) == sorted(CORPUS)
    assert [k async for k in r.docstore.ayield_keys()] == []
    assert await r.ainvoke(QUERY) == []


# Stores -----------------------------------------------------------------------------


@contextmanager
def sql_store(url: str) -> Iterator[SQLStore]:
    store = SQLStore(namespace=f"s2b-{uuid.uuid4().hex}", engine=create_engine(url))
    store.create_schema()
    try:
        yield store
    finally:
        store.mdelete(list(store.yield_keys()))
        store.engine.dispose()


@asynccontextmanager
async def async_sql_store(url: str) -> AsyncIterator[SQLStore]:
    engine = create_async_engine(url)
    store = SQLStore(namespace=f"s2b-{uuid.uuid4().hex}", engine=engine)
    await store.acreate_schema()
    try:
        yield store
    finally:
        await store.amdelete([k async for k in store.ayield_keys()])
        await engine.dispose()


@contextmanager
def redis_store(url: str) -> Iterator[RedisStore]:
    store = RedisStore(redis_url=url, namespace=f"s2b-{uuid.uuid4().hex}")
    try:
        yield store
    finally:
        leftovers = list(store.yield_keys())
        if leftovers:  # RedisStore.mdelete([]) sends an invalid DEL
            store.mdelete(leftovers)
        store.client.close()


class TestLocalFileStore:
    def test_sync(self, tmp_path: Path) -> None:
        scenario_sync(LocalFileStore(tmp_path / "nodes"), tmp_path / "index")
        assert all(p.resolve().is_relative_to(tmp_path) for p in tmp_path.rglob("*"))

    async def test_async(self, tmp_path: Path) -> None:
        await scenario_async(LocalFileStore(tmp_path / "nodes"), tmp_path / "index")

    def test_save_load_with_the_store_on_disk(self, tmp_path: Path) -> None:
        r = make(LocalFileStore(tmp_path / "nodes"))
        r.add_documents(docs(CORPUS))
        r.save(tmp_path / "index")
        loaded = SmallToBigRetriever.load(
            tmp_path / "index", BagOfWords(), byte_store=LocalFileStore(tmp_path / "nodes")
        )
        assert [d.page_content for d in loaded.invoke(QUERY)] == [
            d.page_content for d in r.invoke(QUERY)
        ]
        assert loaded.add_documents(docs(CORPUS)).unchanged


class TestSQLite:
    def test_sync_engine_used_sync(self, tmp_path: Path) -> None:
        with sql_store(f"sqlite:///{tmp_path / 'nodes.db'}") as store:
            scenario_sync(store, tmp_path / "index")

    async def test_async_engine_used_async(self, tmp_path: Path) -> None:
        async with async_sql_store(f"sqlite+aiosqlite:///{tmp_path / 'nodes.db'}") as store:
            await scenario_async(store, tmp_path / "index")

    async def test_async_engine_used_sync_is_a_clear_error(self, tmp_path: Path) -> None:
        async with async_sql_store(f"sqlite+aiosqlite:///{tmp_path / 'nodes.db'}") as store:
            with pytest.raises(ValueError, match=r"async (mode|engine)"):
                make(store).add_documents(docs(CORPUS))

    async def test_sync_engine_used_async(self, tmp_path: Path) -> None:
        with sql_store(f"sqlite:///{tmp_path / 'nodes.db'}") as store:
            await scenario_async(store, tmp_path / "index")


@pytest.mark.requires_server("postgres")
class TestPostgres:
    def test_sync_engine_used_sync(self, pg_url: str, tmp_path: Path) -> None:
        with sql_store(pg_url) as store:
            scenario_sync(store, tmp_path / "index")

    async def test_async_engine_used_async(self, pg_url: str, tmp_path: Path) -> None:
        async with async_sql_store(pg_url) as store:
            await scenario_async(store, tmp_path / "index")


@pytest.mark.requires_server("redis")
class TestRedis:
    def test_sync(self, redis_url: str, tmp_path: Path) -> None:
        with redis_store(redis_url) as store:
            scenario_sync(store, tmp_path / "index")

    async def test_async(self, redis_url: str, tmp_path: Path) -> None:
        with redis_store(redis_url) as store:
            await scenario_async(store, tmp_path / "index")
