"""Running retrievers over questions: ``k`` results, budgets filled, reports and tables.

**hit@B** applies the hit rule on a budget of ``B`` tokens, under one rule
for every row, reported three ways (:data:`RULES`):

- ``cut-tokens``: the retriever's own output (``k`` doubled until the text
  reaches ``B`` or the retriever runs out), concatenated in rank order and cut
  at ``B`` tokens of the ``token_counter`` (:func:`~.scoring.cut`);
- ``cut-words``: the same, cut at ``B`` whitespace-separated words;
- ``told``: the retriever is told the budget (its ``max_tokens`` option)
  and returns what it judges best; the same cut then applies, so a row that
  overflows gains nothing. A retriever that has no such option can not be
  told: its ``told`` row is its ``cut-tokens`` row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_s2b.core.budget import TokenCounter, approximate_tokens
from langchain_s2b.evaluation.data import Question
from langchain_s2b.evaluation.scoring import Score, cut, pieces, score, whitespace_tokens

BUDGETS: tuple[int, ...] = (256, 512, 1024, 2048)
MAX_K = 4096
RULES: tuple[str, ...] = ("cut-tokens", "cut-words", "told")
"""The budget rules every row is judged by (see the module docstring)."""
BUDGET_OPTION = "max_tokens"


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
    retriever: BaseRetriever,
    query: str,
    budget: int,
    k: int = 4,
    *,
    token_counter: TokenCounter = approximate_tokens,
    **options: Any,
) -> list[Document]:
    """Results with ``k`` doubled until their text reaches ``budget`` or runs out.

    The budget must be reached both in ``token_counter`` tokens and in
    whitespace words, so that either cut has enough text.
    """
    while True:
        docs = invoke_with_k(retriever, query, k, **options)
        tokens = sum(token_counter(d.page_content) for d in docs)
        words = sum(whitespace_tokens(d.page_content) for d in docs)
        if min(tokens, words) >= budget or len(docs) < k or k >= MAX_K:
            return docs
        k *= 2


def can_be_told(retriever: BaseRetriever, option: str = BUDGET_OPTION) -> bool:
    """Whether ``retriever`` has a budget option of that name (``SmallToBigRetriever``)."""
    return option in type(retriever).model_fields and getattr(
        retriever, "_expects_other_args", False
    )


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
    """hit@B under the rule ``budget_option`` asked for (``told``), else ``cut-tokens``."""
    recall_at: dict[int, float | None] = field(default_factory=dict)
    hit_by_rule: dict[str, dict[int, float]] = field(default_factory=dict)
    """hit@B under every rule of :data:`RULES`."""
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
    token_counter: TokenCounter = approximate_tokens,
    rules: Sequence[str] = RULES,
    doc_id_key: str = "source_id",
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Run ``retriever`` over ``questions`` at ``k`` and at each token budget, under every rule.

    Args:
        retriever: any LangChain retriever (see :func:`invoke_with_k` for ``k``).
        questions: from :func:`load_questions`.
        name: the row's name in the table.
        k: results per question for the unbudgeted metrics.
        budgets: token budgets for ``hit@B``.
        budget_option: the per-call option that tells the retriever the budget
            (default ``"max_tokens"``); given, the report's ``hit_at`` is the
            ``told`` rule, else ``cut-tokens``. Every rule is in ``hit_by_rule``.
        token_counter: text -> tokens, for budgets and the ``tokens`` column; a
            retriever that has a ``token_counter`` field is told to use it too.
        rules: which of :data:`RULES` to run.
        doc_id_key: the metadata field that holds a result's document id.
        progress: called with 1 after each question.
    """
    if not questions:
        msg = "evaluate() needs at least one question."
        raise ValueError(msg)
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        msg = f"Unknown evaluation rule(s) {unknown}; allowed: {list(RULES)}."
        raise ValueError(msg)
    retriever = _counting_with(retriever, token_counter)
    option = budget_option or BUDGET_OPTION
    t0 = time.perf_counter()
    at_k: list[Score] = []
    by_rule: dict[str, dict[int, list[Score]]] = {r: {b: [] for b in budgets} for r in rules}
    for question in questions:
        docs = invoke_with_k(retriever, question.question, k)
        at_k.append(score(question, pieces(docs, doc_id_key), token_counter))
        per_doc = max(1.0, at_k[-1].tokens / max(1, len(docs)))
        first = max(k, int(max(budgets, default=0) / per_doc) + 1)
        for rule, budget, parts in _budgeted(
            retriever, question.question, budgets, rules, option, first, token_counter
        ):
            counter = whitespace_tokens if rule == "cut-words" else token_counter
            kept = cut(pieces(parts, doc_id_key), budget, counter)
            by_rule[rule][budget].append(score(question, kept, token_counter))
        if progress is not None:
            progress(1)
    main_rule = "told" if budget_option else "cut-tokens"
    main = by_rule.get(main_rule, {})
    return Report(
        name=name or type(retriever).__name__,
        k=k,
        n=len(questions),
        hit_rate=_mean([s.hit for s in at_k]),
        answer_rate=_mean([s.answer for s in at_k]),
        evidence_recall=_mean_or_none([s.recall for s in at_k]),
        mean_tokens=_mean([s.tokens for s in at_k]),
        hit_at={b: _mean([s.hit for s in scores]) for b, scores in main.items()},
        recall_at={b: _mean_or_none([s.recall for s in v]) for b, v in main.items()},
        hit_by_rule={
            rule: {b: _mean([s.hit for s in scores]) for b, scores in per_budget.items()}
            for rule, per_budget in by_rule.items()
        },
        seconds=time.perf_counter() - t0,
        per_question=at_k,
    )


def _counting_with(retriever: BaseRetriever, token_counter: TokenCounter) -> BaseRetriever:
    """The retriever, counting tokens with ``token_counter`` if it counts tokens at all."""
    if "token_counter" in type(retriever).model_fields:
        return retriever.model_copy(update={"token_counter": token_counter})
    return retriever


def _budgeted(
    retriever: BaseRetriever,
    query: str,
    budgets: Sequence[int],
    rules: Sequence[str],
    option: str,
    first: int,
    token_counter: TokenCounter,
) -> list[tuple[str, int, list[Document]]]:
    """``(rule, budget, results)``: one filled retrieval for the cuts, one per budget told."""
    if not budgets:
        return []
    out: list[tuple[str, int, list[Document]]] = []
    cuts = [r for r in rules if r != "told" or not can_be_told(retriever, option)]
    if cuts:
        docs = fill_budget(retriever, query, max(budgets), first, token_counter=token_counter)
        for rule in cuts:
            out += [("told" if rule == "told" else rule, b, docs) for b in budgets]
    if "told" in rules and can_be_told(retriever, option):
        for budget in budgets:
            docs = invoke_with_k(retriever, query, first, **{option: budget})
            out.append(("told", budget, docs))
    return out


def compare(
    retrievers: Mapping[str, BaseRetriever], questions: Sequence[Question], **kwargs: Any
) -> list[Report]:
    """:func:`evaluate` every named retriever on the same questions."""
    return [evaluate(r, questions, name=name, **kwargs) for name, r in retrievers.items()]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def budget_table(reports: Sequence[Report], rule: str = "cut-tokens") -> str:
    """hit@B of every report under one rule: a row per retriever, a column per budget."""
    budgets = sorted({b for r in reports for b in r.hit_by_rule.get(rule, {})})
    lines = [
        f"| retriever ({rule}) | " + " | ".join(f"{b}" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for r in reports:
        rates = r.hit_by_rule.get(rule, {})
        cells = [f"{rates[b]:.3f}" if b in rates else "n/a" for b in budgets]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
