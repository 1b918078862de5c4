"""Answer questions about four Wikipedia articles in every mode, offline.

Run ``make demo``, or by hand::

    s2b index examples/data/articles.jsonl --store .s2b-demo
    python examples/demo.py --store .s2b-demo

It opens the index that ``s2b index`` built (one SQLite database of nodes,
manifests and child vectors, and the FAISS index file of its last commit), asks
a few of the dataset's questions in each mode, calls the retriever as an agent
tool, and evaluates the modes against plain sentence retrieval on a sample.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.cli.index_dir import open_store
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.evaluation import (
    Question,
    Report,
    evaluate,
    load_questions,
)
from langchain_s2b.evaluation.baselines import MemoEmbeddings
from langchain_s2b.tools import as_tool

HERE = Path(__file__).resolve().parent
MODES = ("parent", "window", "multilevel")


def open_index(store: Path) -> SmallToBigRetriever:
    """The index ``s2b index`` wrote, opened the way the command opens it."""
    opened = open_store(store)
    opened.cache.model = MemoEmbeddings(opened.cache.model)  # remembers query vectors
    opened.restore()
    return opened.retriever


def excerpt(doc: Document, width: int = 160) -> str:
    """``width`` characters of a result around its best-matching child."""
    best = max(doc.metadata["matches"], key=lambda m: m["score"])
    offset = best["start"] - doc.metadata["start"]
    lo = max(0, offset - width // 4)
    text = " ".join(doc.page_content[lo : lo + width].split())
    return ("… " if lo else "") + text + " …"


def found(question: Question, docs: list[Document]) -> bool:
    """Whether a gold evidence span lies inside a returned span of the right article."""
    for doc in docs:
        meta = doc.metadata
        if meta["source_id"] != question.doc_id:
            continue
        if any(meta["start"] <= s and e <= meta["end"] for s, e in question.evidence):
            return True
    return False


def ask(retriever: SmallToBigRetriever, question: Question) -> None:
    """One question, one result per mode."""
    print(f"\nQ: {question.question}   (gold: {question.answers[0]!r})")
    for mode in MODES:
        docs = retriever.invoke(question.question, mode=mode, k=1)
        top = docs[0].metadata
        tokens = sum(estimate_tokens(d.page_content) for d in docs)
        mark = "✓" if found(question, docs) else "✗"
        where = f"{top['level']} of {top.get('title', top['source_id'])}"
        print(f"  {mode:<10} {mark} score {top['score']:.3f}  {tokens:>5} tokens  {where}")
        print(textwrap.indent(textwrap.fill(excerpt(docs[0]), 96), " " * 14))


def agent_tool(retriever: SmallToBigRetriever, question: Question) -> None:
    """What a tool-calling agent sees (content) and what the application keeps (artifact)."""
    tool = as_tool(retriever, mode="window", k=2, window_size=1, max_chars=200)
    call = {"type": "tool_call", "id": "call-1", "name": tool.name, "args": {}}
    call["args"] = {"query": question.question}
    message = tool.invoke(call)
    print(f"\nAgent tool {tool.name!r}: ToolMessage.content (for the model):")
    print(textwrap.indent(str(message.content), "    "))
    print("ToolMessage.artifact (for citations):")
    for doc in message.artifact:
        spans = [(m["start"], m["end"], round(m["score"], 3)) for m in doc.metadata["matches"]]
        print(f"    {doc.metadata['source_id']} [{doc.metadata['start']}, {doc.metadata['end']})"
              f" matched {spans}")  # fmt: skip


def eval_table(reports: list[Report]) -> str:
    """The modes side by side: at ``k``, then hit rate and tokens returned at each budget.

    A row's budget columns follow its own rule (cut at B, or told B with
    ``+ max_tokens``); its ``k`` columns do not depend on a budget, so a
    ``+ max_tokens`` row leaves them to its mode's row ("-").
    """
    budgets = sorted({b for r in reports for b in r.hit_at})
    head = ["retriever", "k", "tokens@k", "hit %", "answer %", "evidence recall %"]
    head += [name for b in budgets for name in (f"hit@{b} %", f"tokens@{b}")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        told = r.main_rule == "told"
        at_k = [f"{r.mean_tokens:.0f}", _pct(r.hit_rate), _pct(r.answer_rate)]
        at_k += [_pct(r.evidence_recall)]
        cells = [r.name, str(r.k), *(["-"] * len(at_k) if told else at_k)]
        for b in budgets:
            tokens = r.tokens_at.get(b)
            cells += [_pct(r.hit_at.get(b)), "n/a" if tokens is None else f"{tokens:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def main() -> None:
    """Parse the options and run the tour."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, default=Path(".s2b-demo"))
    parser.add_argument("--questions", type=Path, default=HERE / "data" / "questions.jsonl")
    parser.add_argument("--ask", type=int, default=3, help="questions to show in every mode")
    parser.add_argument("--eval", type=int, default=40, help="questions to evaluate (0: skip)")
    args = parser.parse_args()

    retriever = open_index(args.store)
    questions = load_questions(args.questions)
    step = max(1, len(questions) // max(args.ask, args.eval, 1))
    sample = questions[::step]  # spread over all four articles
    for question in sample[: args.ask]:
        ask(retriever, question)
    agent_tool(retriever, sample[0])
    if args.eval:
        rows = {"sentences (plain chunks)": retriever.vectorstore.as_retriever()}
        rows.update({mode: retriever.model_copy(update={"mode": mode}) for mode in MODES})
        subset = sample[: args.eval]
        reports = [evaluate(r, subset, name=n, k=3, budgets=(256, 1024)) for n, r in rows.items()]
        # The small-to-big modes can also be told the budget and fill it themselves.
        reports += [
            evaluate(
                r,
                subset,
                name=f"{n} + max_tokens",
                k=3,
                budgets=(256, 1024),
                budget_option="max_tokens",
            )
            for n, r in rows.items()
            if n in MODES
        ]
        print(f"\nEvaluation on {len(subset)} questions, k=3 (rates in %; hit@B and tokens@B:")
        print("results joined in rank order and cut at B tokens, or told the budget with")
        print("`+ max_tokens`, whose rows differ from their mode's only at a budget):\n")
        print(eval_table(reports))


if __name__ == "__main__":
    main()
