"""What a hybrid query's ranking costs rows first: a row engine sized before it is built.

.. code-block:: bash

    python benchmarks/rows_first.py                 # 10k children, 60 questions
    python benchmarks/rows_first.py --children 100000

Issue 34 asks that a query cost what its searches cost. The hybrid ranking
(:func:`~langchain_s2b.core.ranking.ranked`: one ``Search`` that brings BM25's
list joined on rows, then the fusion) builds, for each of ~190 candidates, a
node key, a place, a ``Scored`` and entries in several lists and dicts, in
many passes. This script ranks the same query *rows first*, the way a row
engine would, keeping every one of the library's tie rules:

1. FAISS's top ``depth + 1`` by score (a stable sort), the group of equal scores at
   the cut left out (``settle``), equal scores in document order (``dedupe_hits``);
2. tantivy's best ``n`` and every leaf tied with the ``n``-th, their rows from the
   row column, equal scores by key (``top_by_key``);
3. one node place per row of the union, the dense scores of BM25's other rows from
   the stored vectors, the fusion on arrays, a ``Scored`` built once per candidate.

The check: for every query, the same hits in the same order with the same fused
floats as the library. The timing: each query runs both ways and the bare
searches, in an order that turns with each query (the first to run a query
finds its index pages cold), thread CPU time, medians.
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
from langchain_s2b.core.keys import PROXY_MARK, base_source_key  # noqa: E402
from langchain_s2b.core.ranking import first_depth, ranked  # noqa: E402
from langchain_s2b.core.relevance import STATS_DEPTH, scale_of  # noqa: E402
from langchain_s2b.retriever import _private  # noqa: E402
from langchain_s2b.store.children.child_index import _query_row  # noqa: E402
from langchain_s2b.store.lexical.analyzer import query_terms  # noqa: E402
from langchain_s2b.store.lexical.top import FirstDepth  # noqa: E402
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

    def library(q: str) -> tuple[list[str], list[float]]:
        got = drive(ranked(q, vectors[q], params, depth, params.fetch_k), io.run)
        fused = got.fused or {}
        return [hit.key for hit in got.hits], [fused[hit.key] for hit in got.hits]

    first = FirstDepth()  # the prototype's own, learnt as the library's is

    def exact(q: str) -> tuple[list[str], list[float]] | None:
        """The hybrid ranking rows first, with the library's tie rules (``None``: not unfiltered
        FAISS rows only, the library's general path)."""
        query = _query_row(vectors[q])
        scores, rows = index.search_rows(query, depth + 1)
        row_list = rows[0].tolist()
        if -1 in row_list or len(row_list) <= depth:
            return None  # a small or deleted-from index: the library's general path
        s = scores[0]
        order = np.argsort(-s, kind="stable")  # settle's stable sort, best first
        s, dense_rows = s[order], rows[0][order]
        cut = s[depth - 1]
        n_dense = depth if s[depth] < cut else int(np.count_nonzero(s[:depth] > cut))
        tied = None if s[depth] < cut else float(cut)
        dense_rows, dense_scores = dense_rows[:n_dense], s[:n_dense]
        # BM25: tantivy's rows, the n best and every leaf tied with the n-th (top_by_key)
        words = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", term))
                for term in query_terms(q)
            ]
        )
        searcher = engine.searcher()
        deep = first(TOP_N)
        while True:
            found = searcher.search(words, deep).hits
            if len(found) < deep or found[TOP_N - 1][0] > found[-1][0]:
                break
            deep *= 2
        first.saw(found, TOP_N)
        end = min(TOP_N, len(found))
        low = found[end - 1][0] if found else 0.0
        while end < len(found) and found[end][0] >= low:
            end += 1
        chosen = found[:end]
        lexical_rows = searcher.fast_field_values("row", list(map(_SECOND, chosen)))
        if None in lexical_rows:
            return None
        lexical_scores = list(map(float, map(_FIRST, chosen)))
        # one node place per row of the union (and of BM25's ties past its n-th)
        place_of = dict.fromkeys(dense_rows.tolist())
        place_of.update(dict.fromkeys(lexical_rows))
        union = list(place_of)
        places = records.node_places(np.asarray(union, dtype=np.int64))
        if None in places or PROXY_MARK in "\0".join(map(_FIRST, places)):  # type: ignore[arg-type]
            return None
        place_of = dict(zip(union, places, strict=True))
        if len(chosen) > TOP_N or len(set(lexical_scores)) < len(lexical_scores):  # ties: by key
            pairs = sorted(
                zip(lexical_scores, lexical_rows, strict=True),
                key=lambda p: (-p[0], place_of[p[1]][0]),
            )[:TOP_N]
            lexical_scores = list(map(_FIRST, pairs))
            lexical_rows = list(map(_SECOND, pairs))
        dense_list = dense_rows.tolist()
        dense_floats = dense_scores.tolist()
        runs = np.flatnonzero(dense_scores[1:] == dense_scores[:-1])
        if len(runs):  # equal dense scores in document order (dedupe_hits)
            triples = sorted(
                zip(dense_floats, dense_list, range(len(dense_list)), strict=True),
                key=lambda t: (-t[0], base_source_key(place_of[t[1]][1]), place_of[t[1]][2]),
            )
            dense_list = list(map(_SECOND, triples))
        scale_scores = list(dense_floats)
        if tied is not None:
            scale_scores += [tied] * (min(depth, STATS_DEPTH) - len(scale_scores))
        scale = scale_of(scale_scores)
        at = dict(zip(dense_list, range(len(dense_list)), strict=True))
        only = [row for row in lexical_rows if row not in at]
        at.update(zip(only, range(len(at), len(at) + len(only)), strict=True))
        extra = index.scores_of(query, only)
        every = np.concatenate([np.asarray(dense_floats, dtype=np.float64), extra])
        lexical_all = np.full(len(at), 0.0)
        kept_z = z_scores(lexical_scores)
        lexical_all[:] = min(kept_z, default=0.0)
        lexical_all[[at[row] for row in lexical_rows]] = kept_z
        fused = scale.z_array(every) + LEXICAL_WEIGHT * lexical_all
        ranks = np.argsort(-fused, kind="stable").tolist()
        union_rows = dense_list + only
        ordered_rows = [union_rows[i] for i in ranks]
        got = list(map(place_of.__getitem__, ordered_rows))
        keys = list(map(_FIRST, got))
        fields = zip(
            keys,
            every[ranks].tolist(),
            map(_SECOND, got),
            map(_THIRD, got),
            [None] * len(keys),
            strict=True,
        )
        hits = list(map(tuple.__new__, repeat(Scored), fields))
        return [hit.key for hit in hits], fused[ranks].tolist()

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

    for q in asked:
        mine = exact(q)
        if mine is None:
            print(f"rows_first.py: no rows-first answer for {q!r} (the library's general path)")
            return 1
        if mine != library(q):
            print(f"rows_first.py: rows first differs from the library for {q!r}")
            return 1
    print(f"all {len(asked)} queries: rows first gives the library's hits, order and fused floats")
    a, b, c = _turning((library, exact, searches), asked, args.rounds)
    print(
        f"ranking, {args.children:,} children (thread CPU, median of {len(asked) * args.rounds}):"
    )
    print(f"  the bare searches (FAISS top-{depth}, tantivy top-{TOP_N}): {c:.0f} us")
    print(f"  library (ranked: Search with BM25 joined, fusion): {a:.0f} us (own {a - c:.0f} us)")
    print(f"  rows first (arrays; keys and Scored once):        {b:.0f} us (own {b - c:.0f} us)")
    return 0


def _turning(
    calls: tuple[Callable[[str], Any], ...], queries: list[str], rounds: int
) -> tuple[float, ...]:
    """Median thread CPU time (us) of each call; for each query the calls run in turn, the
    first one turning with each query (whichever runs a query first finds its pages cold)."""
    times: list[list[int]] = [[] for _ in calls]
    order = list(range(len(calls)))
    for round_ in range(rounds + 1):  # the first round warms
        for i, q in enumerate(queries):
            turn = (i + round_) % len(calls)
            for at in order[turn:] + order[:turn]:
                t = time.thread_time_ns()
                calls[at](q)
                if round_:
                    times[at].append(time.thread_time_ns() - t)
    return tuple(statistics.median(out) / 1e3 for out in times)


if __name__ == "__main__":
    raise SystemExit(main())
