"""What a query costs against the searches it runs, and opening against its floor (issue 34).

.. code-block:: bash

    python benchmarks/query_cost.py                          # 10k and 100k children
    python benchmarks/query_cost.py --sizes 10000 --full     # adds 1M (make bench FULL=1)
    python benchmarks/query_cost.py --json out.json          # the rows, for run.py's targets
    python benchmarks/query_cost.py --profile 10000          # cProfile of the hybrid path
    python benchmarks/query_cost.py --code ../base           # another checkout, same script

**Query cost** (item 2). Window mode (sentence leaves) over the synthetic
corpus (:mod:`corpus`) in a ``FaissIndex("HNSW32", search_params="efSearch=64")``,
grown to each size in turn; query vectors memoised (``CachedQueryEmbedding``:
``embed_query`` is a dict lookup, the model costs nothing). Two retrievers
share that index: ``hybrid=True`` (the default) and ``hybrid=False``. Each
query runs ``invoke(q, k=4, fetch_k=20, window_size=1)`` on both, and the
floor's parts for the same query, in an order that rotates query by query:

- the bare FAISS search of the same FAISS object, ``search(qvec, 100)`` (the
  hybrid path's depth) and ``search(qvec, 20)`` (the dense path's);
- tantivy's own ``searcher.search(query, 100)`` on the retriever's lexical
  index, the query parsed as the library parses it (its terms, one optional
  term query each); the parse and reading the hits' keys are left out;
- LangChain's ``invoke`` of an empty ``BaseRetriever`` (returns ``[]``).

Hybrid floor = FAISS top-100 + tantivy top-100 + empty invoke; dense floor =
FAISS top-20 + empty invoke. **Under a budget**: the same call on the hybrid
retriever with ``mode=`` each mode and ``max_tokens=500``, in a rotation of its
own with the hybrid floor's parts (no target: what a reached ceiling adds, its
leaves read around the hits, against the hybrid floor measured beside it).
Times are CPU time of the calling thread (``time.thread_time``), medians over
the queries and rounds, FAISS single-threaded. ``own_ms`` = invoke - floor:
the retriever's own work. ``faiss_depths``/``text_depths`` are the searches
the retriever actually asked for (recorded once per query before timing).
``engines_ms``/``outside_ms`` (:func:`outside_engines`, a pass after the
rotation): an ``invoke``'s time in every FAISS and tantivy call it made, as
deep as it asked (BM25's ties by key take tantivy deeper than the floor's top
100 at 1M), and the rest less the empty ``invoke``: the retriever's own Python,
whatever the engines were asked.

**Opening** (item 3): :func:`scale.measure_opening`, fresh processes: process
CPU time of ``SmallToBigRetriever.load`` + the first ``invoke`` vs
``faiss.read_index`` + reading the saved text once + the same bare search.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import io
import json
import pkgutil
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import HashEmbedding, load_questions  # noqa: E402
from run import DIM, EMPTY_RETRIEVER, Corpus, log, machine, query_vectors, table  # noqa: E402

from langchain_s2b import FaissIndex, SmallToBigRetriever  # noqa: E402

QUERY: dict[str, Any] = {"k": 4, "fetch_k": 20, "window_size": 1}
"""The issue's call: ``invoke(q, **QUERY)``."""
BUDGET = 500
"""The budget section's ``max_tokens``: a ceiling every mode reaches, so each reads leaves."""
BUDGET_MODES = ("parent", "window", "multilevel", "pack")
HYBRID_DEPTH = 100
DENSE_DEPTH = 20
ROUNDS = 2


# The library's parts the floor needs (private: looked up defensively) -------------


def _library(name: str, default: Any = None) -> Any:
    """``name`` from the module of ``langchain_s2b`` that defines it (its path may move)."""
    import langchain_s2b

    candidates = ["langchain_s2b.store.lexical_index"]
    candidates += [
        m.name
        for m in pkgutil.walk_packages(langchain_s2b.__path__, "langchain_s2b.")
        if "lexical" in m.name
    ]
    for module in dict.fromkeys(candidates):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    if default is not None:
        return default
    msg = f"query_cost: no langchain_s2b module defines {name!r} any more (it moved); update me"
    raise RuntimeError(msg)


class TextFloor:
    """tantivy's own search on the lexical index a ``FaissIndex`` holds, as the library asks it."""

    def __init__(self, index: FaissIndex) -> None:
        import tantivy

        lexical = index.lexical()
        self.engine = getattr(lexical, "_index", None)
        self.schema = getattr(lexical, "_schema", None)
        if self.engine is None or self.schema is None or not hasattr(self.engine, "searcher"):
            msg = (
                f"query_cost: FaissIndex.lexical() is a {type(lexical).__name__} without the "
                "tantivy Index (_index) and schema (_schema) it had; update TextFloor"
            )
            raise RuntimeError(msg)
        self.terms: Callable[[str], list[str]] = _library("query_terms")
        self.field: str = _library("_TEXT", "text")
        self.tantivy = tantivy
        self.parsed: dict[str, Any] = {}

    @property
    def segments(self) -> int:
        """How many segments tantivy searches (each commit may add one; merges remove them)."""
        return int(self.engine.searcher().num_segments)  # type: ignore[union-attr]

    def query(self, text: str) -> Any:
        """The library's query for ``text``: one optional term query per distinct term."""
        if text not in self.parsed:
            t = self.tantivy
            self.parsed[text] = t.Query.boolean_query(
                [
                    (t.Occur.Should, t.Query.term_query(self.schema, self.field, term))
                    for term in self.terms(text)
                ]
            )
        return self.parsed[text]

    def timed(self, text: str, depth: int) -> float:
        """Thread CPU seconds of ``searcher.search(query, depth).hits`` (searcher made before)."""
        query = self.query(text)
        searcher = self.engine.searcher()  # type: ignore[union-attr]
        c0 = time.thread_time()
        searcher.search(query, depth).hits  # noqa: B018
        return time.thread_time() - c0


class Recorder:
    """Wraps an object and records the depth of each call of one of its methods."""

    def __init__(self, inner: Any, method: str, depth_arg: int) -> None:
        self.inner, self.method, self.depth_arg = inner, method, depth_arg
        self.depths: list[int] = []

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        self.depths.append(int(args[self.depth_arg]))
        return getattr(self.inner, self.method)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return self._call if name == self.method else getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)


def searches_made(
    retriever: SmallToBigRetriever, index: FaissIndex, query: str
) -> tuple[list[int], list[int]]:
    """The FAISS and lexical depths one ``invoke`` asks for (through recording wrappers)."""
    raw, lexical = index._index, index._lexical
    vec, text = Recorder(raw, "search", 1), Recorder(lexical, "search", 1)
    index._index = vec
    if lexical is not None:
        index._lexical = text  # type: ignore[assignment]
    try:
        retriever.invoke(query, **QUERY)
    finally:
        index._index, index._lexical = raw, lexical
    return vec.depths, text.depths


class EngineClock:
    """Wraps an engine object; every method call is timed (thread CPU) into ``spent[0]``.

    Each ``search(query, depth)`` call's depth is kept in ``depths``;
    ``child``: the method whose answer is wrapped too (tantivy's ``searcher()``).
    """

    def __init__(
        self, inner: Any, spent: list[float], depths: list[int], child: str | None = None
    ) -> None:
        self.inner, self.spent, self.depths, self.child = inner, spent, depths, child

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found
        if name == self.child:
            return lambda *a, **k: EngineClock(found(*a, **k), self.spent, self.depths)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if name == "search":
                self.depths.append(int(args[1]))
            c0 = time.thread_time()
            try:
                return found(*args, **kwargs)
            finally:
                self.spent[0] += time.thread_time() - c0

        return timed

    def __len__(self) -> int:
        return len(self.inner)


def outside_engines(
    retriever: SmallToBigRetriever, index: FaissIndex, queries: list[str], rounds: int
) -> dict[str, Any]:
    """One ``invoke``'s time in the engines and outside them (ms, medians over the queries).

    The engines are FAISS's index object and tantivy's searcher: every call the
    retriever makes on them is timed inside the same ``invoke`` (searches as
    deep as it asked, BM25's ties included); outside = invoke - those calls. A
    pass of its own after the rotation (the clocks' own cost, a few calls a
    query, lands outside). Also tantivy's depths as asked, and the share of
    queries that searched it twice.
    """
    raw, lexical = index._index, index._lexical
    spent = [0.0]
    engine: list[float] = []
    outside: list[float] = []
    text_depths: list[int] = []
    twice = 0
    index._index = EngineClock(raw, spent, [])
    engine_of_text = getattr(lexical, "_index", None)
    if lexical is not None and engine_of_text is not None:
        lexical._index = EngineClock(engine_of_text, spent, text_depths, child="searcher")
    try:
        for _ in range(rounds):
            for query in queries:
                spent[0] = 0.0
                asked = len(text_depths)
                c0 = time.thread_time()
                retriever.invoke(query, **QUERY)
                total = time.thread_time() - c0
                engine.append(spent[0])
                outside.append(total - spent[0])
                twice += len(text_depths) - asked > 1
    finally:
        index._index = raw
        if lexical is not None and engine_of_text is not None:
            lexical._index = engine_of_text
    return {
        "engines_ms": statistics.median(engine) * 1e3,
        "outside": statistics.median(outside) * 1e3,
        "tantivy_depths_asked": sorted(set(text_depths)),
        "tantivy_twice_share": twice / len(engine),
    }


# Query cost -----------------------------------------------------------------------


def floor_timers(
    index: FaissIndex, queries: list[str], qvecs: np.ndarray
) -> dict[str, Callable[[int], float]]:
    """The floor's parts, each timing query ``i`` (thread CPU seconds).

    ``faiss100``/``faiss20``: the bare search of the index's FAISS object;
    ``tantivy100``: tantivy's own top 100 (:class:`TextFloor`); ``empty``:
    LangChain's ``invoke`` of an empty retriever.
    """
    raw = index._index
    if raw is None or not hasattr(raw, "search"):
        msg = "query_cost: FaissIndex._index is no longer the FAISS index object; update me"
        raise RuntimeError(msg)
    text = TextFloor(index)

    def bare(depth: int) -> Callable[[int], float]:
        def run(i: int) -> float:
            row = qvecs[i : i + 1]
            c0 = time.thread_time()
            raw.search(row, depth)
            return time.thread_time() - c0

        return run

    def empty(i: int) -> float:
        c0 = time.thread_time()
        EMPTY_RETRIEVER.invoke(queries[i])
        return time.thread_time() - c0

    return {
        "faiss100": bare(HYBRID_DEPTH),
        "faiss20": bare(DENSE_DEPTH),
        "tantivy100": lambda i: text.timed(queries[i], HYBRID_DEPTH),
        "empty": empty,
    }


def query_cost(
    corpus: Corpus, queries: list[str], qvecs: np.ndarray, rounds: int
) -> list[dict[str, Any]]:
    """Both paths and their floors at the corpus's current size, interleaved query by query."""
    index = corpus.index
    hybrid = corpus.retriever
    dense = SmallToBigRetriever(
        vectorstore=index, docstore=hybrid.docstore, mode="window", hybrid=False
    )
    text = TextFloor(index)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    plans = {
        name: [searches_made(r, index, q) for q in queries]
        for name, r in (("hybrid", hybrid), ("dense", dense))
    }

    def invoke(retriever: SmallToBigRetriever, **more: Any) -> Callable[[int], float]:
        options = {**QUERY, **more}

        def run(i: int) -> float:
            c0 = time.thread_time()
            retriever.invoke(queries[i], **options)
            return time.thread_time() - c0

        return run

    floor_parts = floor_timers(index, queries, qvecs)
    issue = {"hybrid": invoke(hybrid), "dense": invoke(dense), **floor_parts}
    # under a budget: a rotation of its own (its leaves' reads would cool the issue's floor)
    budget = {
        f"budget:{mode}": invoke(hybrid, mode=mode, max_tokens=BUDGET) for mode in BUDGET_MODES
    }
    budget |= {f"budget:{name}": floor_parts[name] for name in ("faiss100", "tantivy100", "empty")}
    try:
        cols = rotation(issue, len(queries), rounds) | rotation(budget, len(queries), rounds)
        split = {
            name: outside_engines(r, index, queries, rounds)
            for name, r in (("hybrid", hybrid), ("dense", dense))
        }
    finally:
        faiss.omp_set_num_threads(threads)
    m = {name: statistics.median(values) * 1e3 for name, values in cols.items()}
    rows = []
    for path, searches in (
        ("hybrid", {"faiss_ms": m["faiss100"], "tantivy_ms": m["tantivy100"]}),
        ("dense", {"faiss_ms": m["faiss20"], "tantivy_ms": 0.0}),
    ):
        floor = sum(searches.values()) + m["empty"]
        faiss_depths = sorted({d for f, _ in plans[path] for d in f})
        text_depths = sorted({d for _, t in plans[path] for d in t})
        rows.append(
            {
                "section": "query cost",
                "path": path,
                "children": len(index),
                "invoke_ms": m[path],
                "floor_ms": floor,
                **searches,
                "empty_invoke_ms": m["empty"],
                "ratio": m[path] / floor,
                "own_ms": m[path] - floor,
                "engines_ms": split[path]["engines_ms"],
                "outside_ms": split[path]["outside"] - m["empty"],
                "tantivy_depths_asked": split[path]["tantivy_depths_asked"],
                "tantivy_twice_share": split[path]["tantivy_twice_share"],
                "faiss_depths": faiss_depths,
                "text_depths": text_depths,
                "tantivy_segments": text.segments,
                "queries": len(queries),
                "rounds": rounds,
            }
        )
    hybrid_floor = m["budget:faiss100"] + m["budget:tantivy100"] + m["budget:empty"]
    for mode in BUDGET_MODES:
        spent = m[f"budget:{mode}"]
        rows.append(
            {
                "section": "budget cost",
                "path": f"{mode}, max_tokens={BUDGET}",
                "children": len(index),
                "invoke_ms": spent,
                "floor_ms": hybrid_floor,
                "ratio": spent / hybrid_floor,
                "own_ms": spent - hybrid_floor,
                "queries": len(queries),
                "rounds": rounds,
            }
        )
    return rows


def rotation(
    parts: dict[str, Callable[[int], float]], n_queries: int, rounds: int
) -> dict[str, list[float]]:
    """Each part's times, query by query, in an order that rotates (after an untimed round)."""
    names = list(parts)
    cols: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n_queries):  # warm-up, untimed
        for name in names:
            parts[name](i)
    for r in range(rounds):
        for i in range(n_queries):
            turn = (r * n_queries + i) % len(names)
            for name in names[turn:] + names[:turn]:
                cols[name].append(parts[name](i))
    return cols


def profile_hybrid(corpus: Corpus, queries: list[str], top: int = 15, rounds: int = 3) -> str:
    """cProfile of the hybrid path's ``invoke`` over the queries: top entries, cumulative, own."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for _ in range(rounds):
            for q in queries:
                corpus.retriever.invoke(q, **QUERY)
        profiler.disable()
    finally:
        faiss.omp_set_num_threads(threads)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# Targets --------------------------------------------------------------------------


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 34 items 2 and 3, each next to this run's figure."""
    out: list[dict[str, Any]] = []

    def add(measure: str, target: str, value: str, met: bool | None) -> None:
        out.append({"measure": measure, "target": target, "value": value, "met": met})

    cost = [r for r in rows if r["section"] == "query cost"]
    for r in cost:
        add(
            f"query / its floor, {r['path']}, {r['children']:,} children, HNSW32",
            "<= 3x",
            f"{r['ratio']:.2f}x ({r['invoke_ms']:.2f} / {r['floor_ms']:.2f} ms)",
            r["ratio"] <= 3,
        )
    for path in ("hybrid", "dense"):
        own = {r["children"]: r for r in cost if r["path"] == path}
        if len(own) > 1:
            lo, hi = own[min(own)], own[max(own)]
            growth = hi["own_ms"] / lo["own_ms"]
            units = (hi["own_ms"] / hi["empty_invoke_ms"]) / (lo["own_ms"] / lo["empty_invoke_ms"])
            add(
                f"own work (invoke - floor), {path}, {min(own):,} -> {max(own):,} children",
                "<= 1.5x (10k -> 1M)",
                f"{lo['own_ms']:.2f} -> {hi['own_ms']:.2f} ms ({growth:.2f}x; {units:.2f}x "
                "counted in empty invokes timed alongside)",
                growth <= 1.5 if max(own) >= 1_000_000 else None,  # None: not yet at 1M
            )
            if "outside_ms" in lo and "outside_ms" in hi:  # runs before 2026-12-05 lack it
                add(
                    f"own work outside the engines' calls, {path}, {min(own):,} -> "
                    f"{max(own):,} children (information: the searches it asked, ties included, "
                    "are not counted)",
                    "-",
                    f"{lo['outside_ms']:.2f} -> {hi['outside_ms']:.2f} ms "
                    f"({hi['outside_ms'] / lo['outside_ms']:.2f}x)",
                    None,
                )
    for r in (r for r in rows if r["section"] == "opening"):
        add(
            f"opening + first query / its floor, {r['mode']}, {r['children']:,} children",
            "<= 3x",
            f"{r['ratio']:.2f}x ({r['open_cpu_s']:.2f} / {r['floor_cpu_s']:.2f} s CPU)",
            r["ratio"] <= 3,
        )
    return out


def render(rows: list[dict[str, Any]]) -> str:
    """The issue's tables: each path against its floor per size, and opening."""
    lines = [
        "| path | children | invoke | floor (FAISS + tantivy + empty invoke) | ratio | own work "
        "| the engines' calls as asked; outside them |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in (r for r in rows if r["section"] == "query cost"):
        parts = f"{r['faiss_ms']:.3f} + {r['tantivy_ms']:.3f} + {r['empty_invoke_ms']:.3f}"
        split = "-"
        if "outside_ms" in r:  # runs before 2026-12-05 lack it
            deep = ", ".join(map(str, r.get("tantivy_depths_asked", [])))
            text = f" (tantivy {deep}; twice {r['tantivy_twice_share']:.0%})" if deep else ""
            split = f"{r['engines_ms']:.2f} ms{text}; {r['outside_ms']:.2f} ms"
        lines.append(
            f"| {r['path']} | {r['children']:,} | {r['invoke_ms']:.2f} ms | "
            f"{r['floor_ms']:.2f} ms ({parts}) | {r['ratio']:.1f}x | {r['own_ms']:.2f} ms "
            f"| {split} |"
        )
    budget = [r for r in rows if r["section"] == "budget cost"]
    if budget:
        lines += [
            "",
            "| under a budget (hybrid) | children | invoke | the hybrid floor | ratio | own work |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in budget:
            lines.append(
                f"| {r['path']} | {r['children']:,} | {r['invoke_ms']:.2f} ms | "
                f"{r['floor_ms']:.2f} ms | {r['ratio']:.1f}x | {r['own_ms']:.2f} ms |"
            )
    opening = [r for r in rows if r["section"] == "opening"]
    if opening:
        lines += [
            "",
            "| opening + first query | children | s2b (load; first query) | floor "
            "(read_index + text; search) | ratio |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in opening:
            lines.append(
                f"| {r['mode']} | {r['children']:,} | {r['open_cpu_s']:.3f} s "
                f"({r['load_cpu_s']:.3f} s; {r['first_query_ms']:.1f} ms) | "
                f"{r['floor_cpu_s']:.3f} s ({r['floor_load_cpu_s']:.3f} s) | {r['ratio']:.1f}x |"
            )
    return "\n".join(lines)


# Main -----------------------------------------------------------------------------


def measure(
    sizes: list[int],
    n_queries: int = 60,
    rounds: int = ROUNDS,
    *,
    opening_sizes: list[int] | None = None,
    code: Path | None = None,
    workdir: Path = Path("/tmp/s2b-scale"),
    profile_at: int | None = None,
) -> list[dict[str, Any]]:
    """Every row: the query cost at each size (one corpus grown), then opening."""
    queries = load_questions(n_queries)
    qvecs = query_vectors(queries, HashEmbedding(DIM))
    table_ = dict(zip(queries, qvecs.tolist(), strict=True))
    corpus = Corpus("window", table_, index_factory="HNSW32", search_params="efSearch=64")
    rows: list[dict[str, Any]] = []
    for size in sorted(sizes):
        t0 = time.perf_counter()
        corpus.grow_to(size)
        log(f"query cost: {corpus.children:,} children in {time.perf_counter() - t0:.0f} s")
        got = query_cost(corpus, queries, qvecs, rounds)
        for row in got:
            log("query cost", json.dumps(row))
        rows += got
        if profile_at == size:
            log(profile_hybrid(corpus, queries))
    del corpus
    gc.collect()
    if opening_sizes:
        from scale import measure_opening

        where = code or HERE.parent
        rows += measure_opening(where, workdir, opening_sizes, QUERY, HYBRID_DEPTH, rounds=5)
        for row in rows[-len(opening_sizes) :]:
            log("opening", json.dumps(row))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--full", action="store_true", help="also 1M children")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--opening", type=int, nargs="*", help="opening sizes (default: 100k)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/s2b-scale"))
    parser.add_argument("--profile", type=int, help="cProfile the hybrid path at this size")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--render", type=Path, help="print the tables of a --json file and stop")
    parser.add_argument(
        "--code", type=Path, help="measure the langchain_s2b of another checkout (a baseline)"
    )
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        print("machine:", json.dumps(saved["machine"]))
        show(saved["rows"])
        return 0
    sizes = sorted(set(args.sizes + ([1_000_000] if args.full else [])))
    opening = args.opening if args.opening is not None else [100_000]
    opening = sorted(set(opening + ([1_000_000] if args.full else [])))
    info = machine()
    rows = measure(
        sizes,
        args.queries,
        args.rounds,
        opening_sizes=opening,
        code=args.code,
        workdir=args.workdir,
        profile_at=args.profile,
    )
    rows += [{"section": "targets", **row} for row in targets(rows)]
    print("machine:", json.dumps(info))
    show(rows)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1, default=str))
    return 0


def show(rows: list[dict[str, Any]]) -> None:
    """Print the issue's tables and the targets."""
    print(render(rows))
    print(table([r for r in rows if r["section"] == "targets"]))


if __name__ == "__main__":
    raise SystemExit(main())
