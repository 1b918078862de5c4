"""The pgvector row of ``run.py``: the same retriever with PostgreSQL + pgvector as child index.

Window mode, ``children`` sentence children of the synthesised corpus, the
parents in the same PostgreSQL (``SQLStore``). The bare search is
``PGVector.similarity_search_with_score_by_vector`` with the same ``k`` the
retriever asks for; both are timed wall-clock (the work happens in the
server process), interleaved, medians.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from corpus import CachedQueryEmbedding, HashEmbedding, Synthesiser
from langchain_community.storage import SQLStore
from langchain_postgres import PGVector

from langchain_s2b import SmallToBigRetriever

DIM = 384


def pgvector_row(url: str, queries: list[str], children: int, reps: int) -> dict[str, Any]:
    hashing = HashEmbedding(DIM)
    table = dict(zip(queries, hashing.matrix(queries).tolist(), strict=True))
    embedding = CachedQueryEmbedding(hashing, table)
    name = f"s2b_bench_{uuid.uuid4().hex[:8]}"
    store = PGVector(embedding, connection=url, collection_name=name, use_jsonb=True)
    parents = SQLStore(namespace=name, db_url=url)
    parents.create_schema()
    retriever = SmallToBigRetriever(vectorstore=store, byte_store=parents, mode="window")
    try:
        synth, n_docs, n = Synthesiser(seed=21), 0, 0
        t0 = time.perf_counter()
        while n < children:
            docs = list(synth.documents(10, start=1000 + n_docs))
            n_docs += len(docs)
            n += retriever.add_documents(docs).num_children
        ingest = time.perf_counter() - t0
        fetch = retriever.fetch_k
        bare, total = [], []
        for _ in range(reps):
            for q in queries:
                t1 = time.perf_counter()
                store.similarity_search_with_score_by_vector(table[q], k=fetch)
                t2 = time.perf_counter()
                retriever.invoke(q)
                t3 = time.perf_counter()
                bare.append(t2 - t1)
                total.append(t3 - t2)
        b, t = statistics.median(bare) * 1e3, statistics.median(total) * 1e3
        return {
            "mode": "window",
            "children": n,
            "index": "pgvector (exact scan) + SQLStore",
            "bare_ms": b,
            "retriever_ms": t,
            "overhead_ms": t - b,
            "ratio": t / b,
            "ingest_children_per_s_incl_embedding": n / ingest,
        }
    finally:
        store.delete_collection()
        keys = list(parents.yield_keys())
        for i in range(0, len(keys), 5000):
            parents.mdelete(keys[i : i + 5000])
