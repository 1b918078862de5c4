"""A server engine as the child index: PostgreSQL + pgvector through langchain-postgres.

The retriever runs unchanged on ``langchain_postgres.PGVector`` as its child
index, with the parent store on the same PostgreSQL (``SQLStore``) or on Redis
(``RedisStore``): every mode, sync and async, add / query / batch / delete.
Results must equal those of the default in-process retriever (FAISS + in-memory
store) on the same documents: same windows, parents and contexts, same scores
(pgvector's cosine distance turned into relevance is FAISS's cosine).

Servers come from ``.ci/servers.sh start`` (see ``tests/conftest.py``): skipped
locally when absent, failing under ``CI=true``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_community.storage import RedisStore, SQLStore
from langchain_core.documents import Document
from langchain_core.stores import BaseStore
from langchain_postgres import PGVector
from sqlalchemy.ext.asyncio import create_async_engine

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.splitters import size_splitter
from langchain_s2b.store.children.hybrid_index import HybridChildIndex
from langchain_s2b.store.lexical.analyzer import analyze
from langchain_s2b.store.lexical.pg_lexical import hex_terms
from tests.unit_tests._embeddings import BagOfWords

pytestmark = pytest.mark.requires_server("postgres")

MODES = ["parent", "window", "multilevel"]
TOPICS = ["glaciers", "violins", "harbours", "bees", "comets", "orchards"]


def _docs() -> list[Document]:
    docs = []
    for n, topic in enumerate(TOPICS[:3]):
        paragraphs = []
        for p in range(3):
            sentences = [  # "very" repeated a different number of times: no tied scores
                f"Part {p} line {s} tells how {topic} meet {TOPICS[(n + s + p) % 6]}"
                + " very" * (s + 4 * p + 12 * n)
                + "."
                for s in range(4)
            ]
            paragraphs.append(" ".join(sentences))
        docs.append(Document(page_content="\n\n".join(paragraphs), id=f"src-{topic}"))
    return docs


QUERIES = ["glaciers meet comets", "violins and bees", "harbours orchards"]


def _fields(mode: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"mode": mode, "k": 2, "fetch_k": 6}
    if mode == "parent":
        fields.update(child_splitter=size_splitter(12), parent_splitter=size_splitter(40))
    return fields


def _reference(mode: str) -> SmallToBigRetriever:
    return SmallToBigRetriever.from_documents(_docs(), BagOfWords(256), **_fields(mode))


def _view(docs: list[Document]) -> list[tuple[str, float, int, int]]:
    return [
        (d.page_content, round(d.metadata["score"], 4), d.metadata["start"], d.metadata["end"])
        for d in docs
    ]


def _byte_store(kind: str, pg_url: str, redis_url: str, *, async_mode: bool) -> BaseStore:
    namespace = f"s2b-test-{uuid.uuid4().hex[:8]}"
    if kind == "redis":
        return RedisStore(redis_url=redis_url, namespace=namespace)
    if async_mode:
        return SQLStore(namespace=namespace, engine=create_async_engine(pg_url))
    store = SQLStore(namespace=namespace, db_url=pg_url)
    store.create_schema()
    return store


@pytest.fixture
def collection() -> str:
    return f"s2b_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def sync_vectors(pg_url: str, collection: str) -> Iterator[PGVector]:
    store = PGVector(BagOfWords(256), connection=pg_url, collection_name=collection, use_jsonb=True)
    yield store
    store.delete_collection()
    if store._engine is not None:
        store._engine.dispose()


@pytest.fixture
async def async_vectors(pg_url: str, collection: str) -> AsyncIterator[PGVector]:
    engine = create_async_engine(pg_url)
    store = PGVector(BagOfWords(256), connection=engine, collection_name=collection, use_jsonb=True)
    yield store
    await store.adelete_collection()
    await engine.dispose()


@pytest.mark.parametrize("parent_store", ["sql", "redis"])
@pytest.mark.parametrize("mode", MODES)
class TestPgvector:
    def test_sync(
        self,
        mode: str,
        parent_store: str,
        sync_vectors: PGVector,
        pg_url: str,
        redis_url: str,
    ) -> None:
        byte_store = _byte_store(parent_store, pg_url, redis_url, async_mode=False)
        retriever = SmallToBigRetriever(
            vectorstore=sync_vectors, byte_store=byte_store, **_fields(mode)
        )
        added = retriever.add_documents(_docs())
        assert sorted(added.added) == sorted(d.id for d in _docs() if d.id)
        assert retriever.add_documents(_docs()).unchanged  # idempotent re-add
        reference = _reference(mode)
        for query in QUERIES:
            got = retriever.invoke(query)
            assert got
            assert _view(got) == _view(reference.invoke(query))
        batched = retriever.batch(QUERIES)
        assert [_view(d) for d in batched] == [_view(retriever.invoke(q)) for q in QUERIES]
        assert retriever.delete(["src-glaciers"]) == ["src-glaciers"]
        for docs in retriever.batch(QUERIES):
            assert all(d.metadata["source_id"] != "src-glaciers" for d in docs)
        assert retriever.verify().ok

    async def test_async(
        self,
        mode: str,
        parent_store: str,
        async_vectors: PGVector,
        pg_url: str,
        redis_url: str,
    ) -> None:
        byte_store = _byte_store(parent_store, pg_url, redis_url, async_mode=True)
        if isinstance(byte_store, SQLStore):
            await byte_store.acreate_schema()
        retriever = SmallToBigRetriever(
            vectorstore=async_vectors, byte_store=byte_store, **_fields(mode)
        )
        added = await retriever.aadd_documents(_docs())
        assert len(added.added) == 3
        reference = _reference(mode)
        for query in QUERIES:
            got = await retriever.ainvoke(query)
            assert _view(got) == _view(reference.invoke(query))
        batched = await retriever.abatch(QUERIES)
        assert [_view(d) for d in batched] == [_view(reference.invoke(q)) for q in QUERIES]
        assert await retriever.adelete(["src-violins"]) == ["src-violins"]
        for query in QUERIES:
            docs = await retriever.ainvoke(query)
            assert all(d.metadata["source_id"] != "src-violins" for d in docs)


# Hybrid search: PostgreSQL's own full-text search, in the same database ------------------
MULTILINGUAL = {
    "hindi": "दुनिया बहुत बड़ी है",
    "thai": "สวัสดีครับ ยินดีต้อนรับ",
    "turkish": "İstanbul büyük bir şehirdir.",
    "greek": "Η ΟΔΟΣ είναι μεγάλη.",  # noqa: RUF001 (Greek on purpose)
    "chinese": "北京欢迎你来参观。",
    "japanese": "東京タワーへようこそ。",
    "arabic": "مرحبا بالعالم الكبير",
    "english": "The Norman_king's dukes ruled Normandy.",
}


class TestPgLexical:
    def test_another_process_finds_every_leaf_in_the_database(
        self, sync_vectors: PGVector, pg_url: str, collection: str
    ) -> None:
        docstore = _byte_store("sql", pg_url, "", async_mode=False)
        writer = SmallToBigRetriever(vectorstore=sync_vectors, byte_store=docstore, mode="window")
        writer.add_documents(_docs())
        want = writer.invoke("glaciers comets", max_tokens=80)
        assert want
        # another process: a new PGVector object on the same collection, and no docstore scan
        other = PGVector(BagOfWords(256), connection=pg_url, collection_name=collection)
        reader = SmallToBigRetriever(vectorstore=other, byte_store=docstore, mode="window")
        index = reader._io.index
        assert isinstance(index, HybridChildIndex)
        assert not index.needs_leaves()  # the rows are in the database already
        assert reader.invoke("glaciers comets", max_tokens=80) == want
        assert index.lexical.keys() == set(sync_vectors_keys(writer))
        writer.delete(["src-glaciers"])
        held = index.lexical.keys()
        assert held
        assert all(not key.startswith("src-glaciers/") for key in held)
        assert reader.verify().ok
        other._engine.dispose()  # type: ignore[union-attr]

    def test_the_filter_selects_the_lexical_list_before_ranking(
        self, sync_vectors: PGVector, pg_url: str
    ) -> None:
        docstore = _byte_store("sql", pg_url, "", async_mode=False)
        r = SmallToBigRetriever(vectorstore=sync_vectors, byte_store=docstore, mode="window")
        docs = [
            Document("Walrus walrus walrus here.", id=f"n{i}", metadata={"t": "noise"})
            for i in range(150)
        ]
        docs.append(Document("One walrus in a long quiet sentence.", id="k", metadata={"t": "k"}))
        r.add_documents(docs)
        index = r._io.index
        assert isinstance(index, HybridChildIndex)
        for flt in ({"t": "k"}, {"$and": [{"t": "k"}, {"start": 0}]}):
            assert [key for key, _ in index.search_text("walrus", 100, flt)] == ["k/sentence/0"]

    @pytest.mark.parametrize("text", sorted(MULTILINGUAL.values()))
    def test_the_engine_keeps_the_analysers_terms(self, pg_url: str, text: str) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy import text as sql

        engine = create_engine(pg_url)
        with engine.connect() as conn:
            found = conn.execute(
                sql("SELECT unnest(tsvector_to_array(to_tsvector('simple', :t)))"),
                {"t": hex_terms(analyze(text))},
            )
            lexemes = {row[0] for row in found}
        engine.dispose()
        assert lexemes == {hex_terms([term]) for term in analyze(text)}
        assert lexemes


def sync_vectors_keys(r: SmallToBigRetriever) -> list[str]:
    keys, _ = r._io.index.list_children(
        [f"src-{t}/sentence/{i}" for t in TOPICS[:3] for i in range(40)]
    )
    assert keys is not None
    return sorted(keys)
