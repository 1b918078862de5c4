"""What BM25's ties by key cost a query, against tantivy's own order (a what-if for issue 34).

.. code-block:: bash

    python benchmarks/tie_rule_cost.py                        # 10k and 1M children (~8 min)
    python benchmarks/tie_rule_cost.py --sizes 10000 --json out.json

BM25's list is the ``n`` best leaves with equal scores taken by key (the
reference's rule, :func:`langchain_s2b.store.lexical.top.top_by_key`): the
answer must not depend on tantivy's history of segments. When a group of equal
scores straddles the ``n``-th place, tantivy is asked deeper and every tied
leaf's key is read. This script measures what that costs against the one
alternative that costs nothing: tantivy's first ``n`` in its own order (a
search ``n`` deep, no deeper; **not the library's rule**: it changes answers
whenever a tie straddles the cut, and is patched in here for the measurement
only).

Same corpus and call as :mod:`query_cost` (window mode, HNSW32, memoised query
vectors, ``invoke(q, k=4, fetch_k=20, window_size=1)``), one corpus grown to
each size; per query, in an order that rotates: the hybrid ``invoke`` with the
library's rule, the same ``invoke`` with tantivy's order, and the floor's parts
(bare FAISS top-100, tantivy's own top-100, the empty ``invoke``). Thread CPU
time, medians over the queries and rounds. The empty ``invoke`` holds no code
of this library: how much it slows from 10k to 1M is how much the machine's
memory, not the retriever's work, adds at 1M.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import HashEmbedding, load_questions  # noqa: E402
from query_cost import QUERY, floor_timers, rotation  # noqa: E402
from run import DIM, Corpus, log, machine, query_vectors  # noqa: E402

from langchain_s2b.store.lexical import lexical_index  # noqa: E402
from langchain_s2b.store.lexical.top import top_by_key  # noqa: E402

_SEARCHER = vars(lexical_index)
"""The lexical index's module: where ``LexicalIndex.search`` looks ``top_by_key`` up."""
_ENGINE_ORDER = [False]
"""Whether :func:`_top` answers in tantivy's own order (set only around one timed call)."""


def _top(
    search: Callable[[int], Sequence[tuple[float, Any]]],
    read: Callable[[Sequence[Any]], list[tuple[str, dict[str, Any]]]],
    n: int,
    keep: Any = None,
    **options: Any,
) -> list[tuple[str, float]]:
    """The library's rule, or (while ``_ENGINE_ORDER``) tantivy's first ``n`` as it orders them."""
    if not _ENGINE_ORDER[0] or keep is not None:
        return top_by_key(search, read, n, keep, **options)
    found = search(n)
    keys = read([address for _, address in found])
    return [(key, float(score)) for (key, _), (score, _) in zip(keys, found, strict=True)]


def measure(sizes: list[int], n_queries: int = 60, rounds: int = 3) -> list[dict[str, Any]]:
    """Both rules' ``invoke`` and the hybrid floor at each size (one corpus grown)."""
    queries = load_questions(n_queries)
    qvecs = query_vectors(queries, HashEmbedding(DIM))
    table_ = dict(zip(queries, qvecs.tolist(), strict=True))
    corpus = Corpus("window", table_, index_factory="HNSW32", search_params="efSearch=64")
    _SEARCHER["top_by_key"] = _top
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    rows: list[dict[str, Any]] = []
    try:
        for size in sorted(sizes):
            corpus.grow_to(size)
            rows.append(_at_size(corpus, queries, qvecs, rounds))
            log("tie rule cost", json.dumps(rows[-1]))
    finally:
        _SEARCHER["top_by_key"] = top_by_key
        faiss.omp_set_num_threads(threads)
    return rows


def _at_size(corpus: Corpus, queries: list[str], qvecs: np.ndarray, rounds: int) -> dict[str, Any]:
    """One size: both rules' ``invoke`` and the floor's parts, in one rotation."""
    retriever = corpus.retriever
    floor = floor_timers(corpus.index, queries, qvecs)

    def invoke(engine_order: bool) -> Callable[[int], float]:
        def run(i: int) -> float:
            _ENGINE_ORDER[0] = engine_order
            try:
                c0 = time.thread_time()
                retriever.invoke(queries[i], **QUERY)
                return time.thread_time() - c0
            finally:
                _ENGINE_ORDER[0] = False

        return run

    parts = {"by_key": invoke(False), "engine_order": invoke(True)}
    parts |= {name: floor[name] for name in ("faiss100", "tantivy100", "empty")}
    m = {k: statistics.median(v) * 1e3 for k, v in rotation(parts, len(queries), rounds).items()}
    hybrid_floor = m["faiss100"] + m["tantivy100"] + m["empty"]
    return {
        "children": len(corpus.index),
        **{f"{k}_ms": v for k, v in m.items()},
        "floor_ms": hybrid_floor,
        "own_by_key_ms": m["by_key"] - hybrid_floor,
        "own_engine_order_ms": m["engine_order"] - hybrid_floor,
        "queries": len(queries),
        "rounds": rounds,
    }


def render(rows: list[dict[str, Any]]) -> str:
    """Own work (invoke - the hybrid floor) under each rule, and the empty ``invoke``, per size."""
    lines = [
        "| children | own work, ties by key | own work, tantivy's order | floor | empty invoke |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['children']:,} | {r['own_by_key_ms']:.2f} ms | "
            f"{r['own_engine_order_ms']:.2f} ms | {r['floor_ms']:.2f} ms | {r['empty_ms']:.3f} ms |"
        )
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        lines.append("")
        lines.append(
            "Growth from the first size to the last: ties by key "
            f"{hi['own_by_key_ms'] / lo['own_by_key_ms']:.2f}x, tantivy's order "
            f"{hi['own_engine_order_ms'] / lo['own_engine_order_ms']:.2f}x, the empty invoke "
            f"{hi['empty_ms'] / lo['empty_ms']:.2f}x."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = measure(args.sizes, args.queries, args.rounds)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
