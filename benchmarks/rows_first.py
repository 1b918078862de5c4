"""What a hybrid query's ranking would cost on row arrays: the row engine's size, measured first.

.. code-block:: bash

    python benchmarks/rows_first.py                 # 10k children, 60 questions
    python benchmarks/rows_first.py --children 100000

Issue 34 asks that a query cost what its searches cost. The hybrid ranking today
(:func:`~langchain_s2b.core.ranking.ranked`: the ``Search`` and ``SearchText``
requests, then the fusion) builds, for each of ~190 candidates, a node key, a
place, a ``Scored``, entries in several dicts and lists, and drops most of them.
This script ranks the same query *rows first*, the way the row engine of the
session notes would:

1. FAISS's top ``depth + 1`` and tantivy's top 126 (the library's first depth), the
   BM25 rows read from the row column;
2. the union and the fusion on numpy arrays of rows and scores (the dense scores of
   BM25's other rows from the stored vectors, as the library scores them);
3. a node key and a ``Scored`` built once per candidate, in fused order.

Each query runs both ways, alternating (thread CPU time, medians). The check: for
every query, the same candidates with the same fused scores (the order may differ
only among equal fused scores: the prototype does not order ties by document or by
key, which the library does). It is a prototype for sizing only: no filter, no
proxy, no tie at either search's cut (such a query is reported and left out).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faiss  # noqa: E402
import numpy as np  # noqa: E402
from query_cost import QUERY  # noqa: E402
from run import query_cost_pair  # noqa: E402

from langchain_s2b.core.fusion import LEXICAL_WEIGHT, TOP_N, z_scores  # noqa: E402
from langchain_s2b.core.hits import Scored  # noqa: E402
from langchain_s2b.core.ranking import first_depth, ranked  # noqa: E402
from langchain_s2b.core.relevance import scale_of  # noqa: E402
from langchain_s2b.retriever import _private  # noqa: E402
from langchain_s2b.store.lexical.analyzer import query_terms  # noqa: E402
from langchain_s2b.store.lexical.top import short_depth  # noqa: E402
from langchain_s2b.store.runner import drive  # noqa: E402
from langchain_s2b.store.vectors.faiss_base import normalise  # noqa: E402

_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    import tantivy

    asked, _, corpus, _ = query_cost_pair(args.children, args.queries)
    faiss.omp_set_num_threads(1)
    retriever = corpus.retriever
    io = _private(retriever)["_io"]
    params = retriever._params(dict(QUERY))
    depth = first_depth(params)
    index = corpus.index
    raw, records, lexical = index._index, index._rows, index.lexical()
    schema, engine = lexical._schema, lexical._index
    vectors = {q: io.index.embed_query(q) for q in asked}

    def library(q: str) -> tuple[list[str], dict[str, float]]:
        got = drive(ranked(q, vectors[q], params, depth, params.fetch_k), io.run)
        return [hit.key for hit in got.hits], dict(got.fused or {})

    def rows_first(q: str) -> tuple[list[str], list[float]] | None:
        query = normalise(np.asarray([vectors[q]], dtype=np.float32))
        scores, rows = raw.search(query, depth + 1)
        if scores[0][depth - 1] == scores[0][depth]:
            return None  # a tie at the dense cut: the library leaves the group out
        dense_rows, dense_scores = rows[0][:depth].tolist(), scores[0][:depth]
        scale = scale_of(dense_scores.tolist())
        words = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", term))
                for term in query_terms(q)
            ]
        )
        searcher = engine.searcher()
        found = searcher.search(words, short_depth(TOP_N)).hits
        if len(found) > TOP_N and found[TOP_N - 1][0] == found[TOP_N][0]:
            return None  # a tie at BM25's cut: the library takes it by key
        chosen = found[:TOP_N]
        lexical_rows = searcher.fast_field_values("row", list(map(_SECOND, chosen)))
        place = dict(zip(dense_rows, range(len(dense_rows)), strict=True))
        only = [row for row in lexical_rows if row not in place]
        stored = np.asarray(raw.reconstruct_batch(np.asarray(only, dtype=np.int64)))
        place.update(zip(only, range(len(place), len(place) + len(only)), strict=True))
        every = np.concatenate([dense_scores, stored @ query[0]]).astype(np.float64)
        lexical_z = z_scores([float(s) for s, _ in chosen])
        lexical_all = np.full(len(place), min(lexical_z))
        lexical_all[[place[row] for row in lexical_rows]] = lexical_z
        fused = scale.z_array(every) + LEXICAL_WEIGHT * lexical_all
        order = np.argsort(-fused, kind="stable")
        ordered = np.asarray(dense_rows + only, dtype=np.int64)[order]
        places = records.node_places(ordered)
        keys = list(map(_FIRST, places))
        fields = zip(
            keys,
            every[order].tolist(),
            map(_SECOND, places),
            map(_THIRD, places),
            [None] * len(keys),
            strict=True,
        )
        hits = list(map(tuple.__new__, repeat(Scored), fields))
        return [hit.key for hit in hits], fused[order].tolist()

    parsed = {}
    for q in asked:
        parsed[q] = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", term))
                for term in query_terms(q)
            ]
        )
    qvecs = {q: normalise(np.asarray([vectors[q]], dtype=np.float32)) for q in asked}

    def searches(q: str) -> None:  # the floor's parts: bare FAISS and tantivy, query made
        raw.search(qvecs[q], depth)
        engine.searcher().search(parsed[q], TOP_N)

    kept = []
    for q in asked:
        mine = rows_first(q)
        if mine is None:
            continue
        keys, fused = library(q)
        if set(mine[0]) != set(keys) or sorted(mine[1]) != sorted(fused[k] for k in keys):
            print(f"rows_first.py: not the library's candidates or fused scores for {q!r}")
            return 1
        kept.append(q)
    print(
        f"{len(kept)} of {len(asked)} queries (the others tie at a cut): the same candidates "
        f"and fused scores both ways"
    )
    a, b, c = _alternating((library, rows_first, searches), kept, args.rounds)
    print(f"ranking, {args.children:,} children (thread CPU, median of {len(kept) * args.rounds}):")
    print(f"  the bare searches (FAISS top-{depth}, tantivy top-{TOP_N}): {c:.0f} us")
    print(f"  library (ranked: Search, SearchText, fusion): {a:.0f} us (own {a - c:.0f} us)")
    print(f"  rows first (arrays; keys and Scored once):   {b:.0f} us (own {b - c:.0f} us)")
    return 0


def _alternating(
    calls: tuple[Callable[[str], Any], ...], queries: list[str], rounds: int
) -> tuple[float, ...]:
    """Median thread CPU time (us) of each call, the calls alternating query by query."""
    times: list[list[int]] = [[] for _ in calls]
    for _ in range(rounds + 1):  # the first round warms
        for q in queries:
            for call, out in zip(calls, times, strict=True):
                t = time.thread_time_ns()
                call(q)
                out.append(time.thread_time_ns() - t)
    warm = len(queries)
    return tuple(statistics.median(out[warm:]) / 1e3 for out in times)


if __name__ == "__main__":
    raise SystemExit(main())
