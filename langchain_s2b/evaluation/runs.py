"""Running retrievers over questions: ``k`` results, budgets filled, reports and tables.

**hit@B** applies the hit rule on a budget of ``B`` tokens. Every retriever
is asked for enough results to fill ``B`` (``k`` doubled until the text
reaches ``B`` tokens or the retriever runs out); the results are
concatenated in rank order and cut at ``B`` tokens (4 characters each);
then the hit is checked. One rule for every row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.evaluation.data import Question
from langchain_s2b.evaluation.scoring import Score, cut, pieces, score

BUDGETS: tuple[int, ...] = (256, 512, 1024, 2048)
MAX_K = 4096


def invoke_with_k(retriever: BaseRetriever, query: str, k: int, **options: Any) -> list[Document]:
    """Ask any retriever for ``k`` results.

    Retrievers whose ``_get_relevant_documents`` takes keyword arguments
    (``SmallToBigRetriever``, ``VectorStoreRetriever``) get ``k=`` and ``options``
    per call; others with a ``k`` field or ``search_kwargs`` are copied with
    that value set (``options`` then need such a retriever).
    """
    if getattr(retriever, "_expects_other_args", False):
        return retriever.invoke(query, k=k, **options)
    if options:
        msg = f"{type(retriever).__name__} takes no per-call options; got {sorted(options)}."
        raise ValueError(msg)
    fields = type(retriever).model_fields
    if "k" in fields:
        return retriever.model_copy(update={"k": k}).invoke(query)
    if "search_kwargs" in fields:
        search_kwargs = {**getattr(retriever, "search_kwargs", {}), "k": k}
        return retriever.model_copy(update={"search_kwargs": search_kwargs}).invoke(query)
    return retriever.invoke(query)


def fill_budget(
    retriever: BaseRetriever, query: str, budget: int, k: int = 4, **options: Any
) -> list[Document]:
    """Results with ``k`` doubled until their text reaches ``budget`` tokens or runs out."""
    while True:
        docs = invoke_with_k(retriever, query, k, **options)
        tokens = sum(estimate_tokens(d.page_content) for d in docs)
        if tokens >= budget or len(docs) < k or k >= MAX_K:
            return docs
        k *= 2


@dataclass
class Report:
    """One retriever's averages over the questions (``None``: not measurable)."""

    name: str
    k: int
    n: int
    hit_rate: float
    answer_rate: float
    evidence_recall: float | None
    mean_tokens: float
    hit_at: dict[int, float] = field(default_factory=dict)
    recall_at: dict[int, float | None] = field(default_factory=dict)
    seconds: float = 0.0
    per_question: list[Score] = field(default_factory=list, repr=False)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return _mean(known) if len(known) == len(values) and known else None


def evaluate(
    retriever: BaseRetriever,
    questions: Sequence[Question],
    *,
    name: str | None = None,
    k: int = 4,
    budgets: Sequence[int] = BUDGETS,
    budget_option: str | None = None,
    doc_id_key: str = "source_id",
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Run ``retriever`` over ``questions`` at ``k`` and at each token budget.

    Args:
        retriever: any LangChain retriever (see :func:`invoke_with_k` for ``k``).
        questions: from :func:`load_questions`.
        name: the row's name in the table.
        k: results per question for the unbudgeted metrics.
        budgets: token budgets for ``hit@B``.
        budget_option: also tell the retriever the budget through this per-call
            option (``"max_tokens"`` for ``SmallToBigRetriever``), so it can fit
            its contexts itself; the same cut is applied afterwards.
        doc_id_key: the metadata field that holds a result's document id.
        progress: called with 1 after each question.
    """
    if not questions:
        msg = "evaluate() needs at least one question."
        raise ValueError(msg)
    t0 = time.perf_counter()
    at_k: list[Score] = []
    at_budget: dict[int, list[Score]] = {b: [] for b in budgets}
    for question in questions:
        docs = invoke_with_k(retriever, question.question, k)
        at_k.append(score(question, pieces(docs, doc_id_key)))
        per_doc = max(1.0, at_k[-1].tokens / max(1, len(docs)))
        for budget, parts in _budgeted(retriever, question, budgets, budget_option, per_doc, k):
            at_budget[budget].append(score(question, cut(pieces(parts, doc_id_key), budget)))
        if progress is not None:
            progress(1)
    return Report(
        name=name or type(retriever).__name__,
        k=k,
        n=len(questions),
        hit_rate=_mean([s.hit for s in at_k]),
        answer_rate=_mean([s.answer for s in at_k]),
        evidence_recall=_mean_or_none([s.recall for s in at_k]),
        mean_tokens=_mean([s.tokens for s in at_k]),
        hit_at={b: _mean([s.hit for s in scores]) for b, scores in at_budget.items()},
        recall_at={b: _mean_or_none([s.recall for s in v]) for b, v in at_budget.items()},
        seconds=time.perf_counter() - t0,
        per_question=at_k,
    )


def _budgeted(
    retriever: BaseRetriever,
    question: Question,
    budgets: Sequence[int],
    option: str | None,
    per_doc: float,
    k: int,
) -> Iterator[tuple[int, list[Document]]]:
    """Results that fill each budget: one retrieval for all, or one per budget with ``option``."""
    if not budgets:
        return
    if option is None:
        first = max(k, int(max(budgets) / per_doc) + 1)
        docs = fill_budget(retriever, question.question, max(budgets), first)
        for budget in budgets:
            yield budget, docs
        return
    for budget in budgets:
        first = max(k, int(budget / per_doc) + 1)
        yield budget, fill_budget(retriever, question.question, budget, first, **{option: budget})


def compare(
    retrievers: Mapping[str, BaseRetriever], questions: Sequence[Question], **kwargs: Any
) -> list[Report]:
    """:func:`evaluate` every named retriever on the same questions."""
    return [evaluate(r, questions, name=name, **kwargs) for name, r in retrievers.items()]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def markdown_table(reports: Sequence[Report]) -> str:
    """A markdown comparison table (rates in percent)."""
    budgets = sorted({b for r in reports for b in r.hit_at})
    head = ["retriever", "k", "tokens", "hit %", "answer %", "evidence recall %"]
    head += [f"hit@{b} %" for b in budgets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        cells = [r.name, str(r.k), f"{r.mean_tokens:.0f}", _pct(r.hit_rate), _pct(r.answer_rate)]
        cells.append(_pct(r.evidence_recall))
        cells += [_pct(r.hit_at.get(b)) for b in budgets]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
