"""Every mode's answers on the query-cost corpus, to check that a change to speed changes nothing.

Speed work (issue 34) must keep every answer: this writes the documents and
metadata of every call below as JSON, so two checkouts can be compared byte
for byte. Run it in each checkout (its own code, the same synthetic corpus:
:mod:`corpus` is seeded) and compare:

.. code-block:: bash

    python benchmarks/same_answers.py --json new.json
    (cd ../base && python benchmarks/same_answers.py --json base.json)
    python benchmarks/same_answers.py --compare ../base/base.json new.json

The calls: the query-cost corpus (:mod:`query_cost`: sentence leaves in an
HNSW32 index, ``HashEmbedding``) grown to ``--children``; hybrid and dense
search; window, parent, multilevel and pack mode; no budget (multilevel and
pack: 1,000 tokens), ``max_tokens=500``, ``k=None`` with 800 tokens, and
``k=6, window_size=2``; the first ``--queries`` SQuAD questions. A call that
raises is recorded as its error's type and first line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import query_cost_pair  # noqa: E402

from langchain_s2b import SmallToBigRetriever  # noqa: E402

MODES = ("window", "parent", "multilevel", "pack")
OPTIONS: tuple[dict[str, Any], ...] = (
    {},
    {"max_tokens": 500},
    {"k": None, "max_tokens": 800},
    {"k": 6, "window_size": 2},
)
BASE: dict[str, Any] = {"k": 4, "fetch_k": 20, "window_size": 1}
NEEDS_BUDGET = ("multilevel", "pack")
DEFAULT_BUDGET = 1000


def answers(children: int, n_queries: int) -> list[list[Any]]:
    """``[path, mode, options, question, documents or error]`` of every call."""
    queries, _, corpus, dense = query_cost_pair(children, n_queries)
    hybrid = corpus.retriever
    out: list[list[Any]] = []
    for path, retriever in (("hybrid", hybrid), ("dense", dense)):
        for mode in MODES:
            for options in OPTIONS:
                call = {**BASE, "mode": mode, **options}
                if mode in NEEDS_BUDGET and "max_tokens" not in call:
                    call["max_tokens"] = DEFAULT_BUDGET
                for query in queries:
                    out.append([path, mode, repr(options), query, _answer(retriever, query, call)])
    return out


def _answer(retriever: SmallToBigRetriever, query: str, call: dict[str, Any]) -> Any:
    try:
        docs = retriever.invoke(query, **call)
    except Exception as err:  # recorded: an error must stay the same error
        first = (str(err).splitlines() or [""])[0]
        return f"error {type(err).__name__}: {first[:200]}"
    return [[d.page_content, json.dumps(d.metadata, sort_keys=True, default=str)] for d in docs]


def compare(a: Path, b: Path) -> int:
    """Print the first call whose answers differ (exit 1), or how many calls agree (exit 0)."""
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    if len(left) != len(right):
        print(f"{a}: {len(left)} calls, {b}: {len(right)} calls")
        return 1
    for one, other in zip(left, right, strict=True):
        if one != other:
            print("differ:", json.dumps(one[:4]))
            print(f"  {a}: {json.dumps(one[4])[:2000]}")
            print(f"  {b}: {json.dumps(other[4])[:2000]}")
            return 1
    print(f"the same answers in all {len(left)} calls")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--json", type=Path, help="write the answers here")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.json is None:
        parser.error("give --json FILE (or --compare A B)")
    got = answers(args.children, args.queries)
    args.json.write_text(json.dumps(got))
    print(f"{len(got)} calls written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
