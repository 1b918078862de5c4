"""Running retrievers over questions: ``k`` results, budgets filled, reports and tables.

**hit@B** applies the hit rule on a budget of ``B`` tokens, under one rule
for every row, reported three ways (:data:`RULES`):

- ``cut-tokens``: the retriever's own output (``k`` doubled until the text
  reaches ``B`` or the retriever runs out), concatenated in rank order and cut
  at ``B`` tokens of the ``token_counter`` (:func:`~.scoring.cut`);
- ``cut-words``: the same, cut at ``B`` whitespace-separated words;
- ``told``: the retriever is told the budget (its ``max_tokens`` option,
  with ``k=None``: as many results as fit) and returns what it judges best;
  the same cut then applies, so a row that overflows gains nothing. A
  retriever that has no such option can not be told: its ``told`` row is its
  ``cut-tokens`` row.

Hit rate alone can not see waste: more text never lowers it. So every budget
of every rule also reports what the caller pays and how much of it is useful
(:class:`BudgetStats`): the tokens returned, evidence recall and evidence
precision. A budget is a ceiling: a retriever told 8,192 tokens that returns
600 at the same hit rate is the better one.
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

BUDGETS: tuple[int, ...] = (256, 512, 1024, 2048, 8192)
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


METRICS: tuple[str, ...] = ("hit", "recall", "precision", "tokens")
"""What :class:`BudgetStats` reports, and what :func:`budget_table` can tabulate."""


@dataclass(frozen=True)
class BudgetStats:
    """One budget under one rule: means over the questions (``None``: not measurable)."""

    hit: float
    recall: float | None
    precision: float | None
    """Share of returned characters inside gold evidence (questions that got text)."""
    tokens: float
    """Tokens returned (``token_counter``), after the cut."""

    @classmethod
    def of(cls, scores: Sequence[Score]) -> BudgetStats:
        """The means of these questions' scores."""
        returned = [s.precision for s in scores if s.tokens]
        return cls(
            hit=_mean([s.hit for s in scores]),
            recall=_mean_or_none([s.recall for s in scores]),
            precision=_mean_or_none(returned),
            tokens=_mean([s.tokens for s in scores]),
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
    evidence_precision: float | None = None
    """At ``k``: share of returned characters inside gold evidence."""
    by_rule: dict[str, dict[int, BudgetStats]] = field(default_factory=dict)
    """Every budget under every rule of :data:`RULES`: hit, recall, precision, tokens."""
    main_rule: str = "cut-tokens"
    """The rule of :attr:`hit_at`: ``told`` when a budget option was named."""
    seconds: float = 0.0
    per_question: list[Score] = field(default_factory=list, repr=False)

    @property
    def hit_by_rule(self) -> dict[str, dict[int, float]]:
        """hit@B under every rule."""
        return {r: {b: s.hit for b, s in v.items()} for r, v in self.by_rule.items()}

    @property
    def hit_at(self) -> dict[int, float]:
        """hit@B under :attr:`main_rule`."""
        return {b: s.hit for b, s in self.by_rule.get(self.main_rule, {}).items()}

    @property
    def recall_at(self) -> dict[int, float | None]:
        """Evidence recall at each budget under :attr:`main_rule`."""
        return {b: s.recall for b, s in self.by_rule.get(self.main_rule, {}).items()}

    @property
    def tokens_at(self) -> dict[int, float]:
        """Mean tokens returned at each budget under :attr:`main_rule`."""
        return {b: s.tokens for b, s in self.by_rule.get(self.main_rule, {}).items()}

    @property
    def precision_at(self) -> dict[int, float | None]:
        """Evidence precision at each budget under :attr:`main_rule`."""
        return {b: s.precision for b, s in self.by_rule.get(self.main_rule, {}).items()}


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
    return Report(
        name=name or type(retriever).__name__,
        k=k,
        n=len(questions),
        hit_rate=_mean([s.hit for s in at_k]),
        answer_rate=_mean([s.answer for s in at_k]),
        evidence_recall=_mean_or_none([s.recall for s in at_k]),
        mean_tokens=_mean([s.tokens for s in at_k]),
        evidence_precision=_mean_or_none([s.precision for s in at_k if s.tokens]),
        by_rule={
            rule: {b: BudgetStats.of(scores) for b, scores in per_budget.items()}
            for rule, per_budget in by_rule.items()
        },
        main_rule="told" if budget_option else "cut-tokens",
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
        for budget in budgets:  # k=None: as many results as fit the budget
            docs = retriever.invoke(query, k=None, **{option: budget})  # type: ignore[arg-type]
            out.append(("told", budget, docs))
    return out


def compare(
    retrievers: Mapping[str, BaseRetriever], questions: Sequence[Question], **kwargs: Any
) -> list[Report]:
    """:func:`evaluate` every named retriever on the same questions."""
    return [evaluate(r, questions, name=name, **kwargs) for name, r in retrievers.items()]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def budget_table(reports: Sequence[Report], rule: str = "cut-tokens", metric: str = "hit") -> str:
    """One metric of every report under one rule: a row per retriever, a column per budget.

    ``metric``: one of :data:`METRICS` (rates to three decimals, tokens whole).
    """
    if metric not in METRICS:
        msg = f"Unknown metric {metric!r}; allowed: {list(METRICS)}."
        raise ValueError(msg)
    budgets = sorted({b for r in reports for b in r.by_rule.get(rule, {})})
    title = rule if metric == "hit" else f"{rule}, {metric}"
    lines = [
        f"| retriever ({title}) | " + " | ".join(f"{b}" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for r in reports:
        stats = r.by_rule.get(rule, {})
        cells = [_cell(getattr(stats[b], metric), metric) if b in stats else "n/a" for b in budgets]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if metric == "tokens" else f"{value:.3f}"


def markdown_table(reports: Sequence[Report]) -> str:
    """A markdown comparison table (rates in percent)."""
    budgets = sorted({b for r in reports for b in r.hit_at})
    head = ["retriever", "k", "tokens", "hit %", "answer %", "evidence recall %"]
    head += ["evidence precision %"]
    head += [f"hit@{b} %" for b in budgets]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        cells = [r.name, str(r.k), f"{r.mean_tokens:.0f}", _pct(r.hit_rate), _pct(r.answer_rate)]
        cells += [_pct(r.evidence_recall), _pct(r.evidence_precision)]
        cells += [_pct(r.hit_at.get(b)) for b in budgets]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
