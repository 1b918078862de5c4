"""Retrieval evaluation: answer hit rate, evidence recall, context tokens, budgets.

Works for any LangChain retriever. The dataset format is the one of
``squad2-dev-articles``: ``documents.jsonl`` rows ``{"id", "title", "text"}``
and ``questions.jsonl`` rows ``{"id", "question", "answers", "doc_id",
"evidence": [{"start", "end"}], "paragraph": {"start", "end"}}`` with
``[start, end)`` character offsets into the document text.

Metrics, per question, averaged over questions:

- **hit**: every character of one gold evidence span lies inside the returned
  spans of the right document (results carry ``start``/``end`` and the
  document id); for results without spans, a gold answer string occurs in
  the returned text (case-insensitive).
- **answer**: a gold answer string occurs in the returned text
  (case-insensitive), whatever the spans; looser, counts lucky repeats.
- **evidence recall**: the share of gold evidence characters inside the
  returned spans of the right document.
- **tokens**: :func:`~langchain_s2b.splitting.estimate_tokens` of the
  returned texts, summed.
- **hit@B**: the same hit rule on a budget of ``B`` tokens. Every retriever
  is asked for enough results to fill ``B`` (``k`` doubled until the text
  reaches ``B`` tokens or the retriever runs out); the results are
  concatenated in rank order and cut at ``B`` tokens (4 characters each);
  then the hit is checked. One rule for every row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from langchain_s2b.splitting import CHARS_PER_TOKEN, estimate_tokens

BUDGETS: tuple[int, ...] = (256, 512, 1024, 2048)
MAX_K = 4096
Span = tuple[int, int]


@dataclass(frozen=True)
class Question:
    """One question with its gold answers and evidence spans in one document."""

    id: str
    question: str
    answers: tuple[str, ...]
    doc_id: str
    evidence: tuple[Span, ...]
    paragraph: Span | None = None


def _read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                msg = f"{path}:{number} is not valid JSON ({err.msg})."
                raise ValueError(msg) from None
            if not isinstance(row, dict):
                msg = f"{path}:{number} must be a JSON object; got {type(row).__name__}."
                raise ValueError(msg)
            rows.append(row)
    return rows


def load_documents(path: str | Path) -> list[Document]:
    """Documents from a JSONL of ``{"id", "text", ...}`` (other fields become metadata)."""
    docs = []
    for i, row in enumerate(_read_jsonl(path), 1):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("text"), str):
            msg = f"{path}: row {i} needs string 'id' and 'text' fields; got {sorted(row)}."
            raise ValueError(msg)
        meta = {k: v for k, v in row.items() if k != "text"}
        docs.append(Document(page_content=row["text"], metadata=meta, id=row["id"]))
    return docs


def load_questions(
    path: str | Path, doc_ids: Iterable[str] | None = None, limit: int | None = None
) -> list[Question]:
    """Questions from a JSONL, optionally only those about ``doc_ids``, at most ``limit``."""
    wanted = None if doc_ids is None else set(doc_ids)
    out: list[Question] = []
    for i, row in enumerate(_read_jsonl(path), 1):
        try:
            question = _question(row)
        except (KeyError, TypeError, ValueError) as err:
            msg = (
                f"{path}: row {i} is not a question row {{id, question, answers, doc_id, "
                f"evidence: [{{start, end}}]}} ({type(err).__name__}: {err})."
            )
            raise ValueError(msg) from None
        if wanted is None or question.doc_id in wanted:
            out.append(question)
        if limit is not None and len(out) >= limit:
            break
    return out


def _question(row: Mapping[str, Any]) -> Question:
    para = row.get("paragraph")
    return Question(
        id=str(row["id"]),
        question=str(row["question"]),
        answers=tuple(str(a) for a in row["answers"]),
        doc_id=str(row["doc_id"]),
        evidence=tuple((int(e["start"]), int(e["end"])) for e in row.get("evidence", [])),
        paragraph=(int(para["start"]), int(para["end"])) if para else None,
    )


# Scoring ---------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Returned text, with its span in its source document when known."""

    text: str
    doc_id: str | None = None
    start: int | None = None
    end: int | None = None


def pieces(docs: Sequence[Document], doc_id_key: str = "source_id") -> list[Piece]:
    """The retrieved documents as pieces (span known when the metadata has it)."""
    out = []
    for doc in docs:
        meta = doc.metadata
        doc_id = meta.get(doc_id_key)
        if doc_id is not None and "start" in meta and "end" in meta:
            out.append(Piece(doc.page_content, str(doc_id), int(meta["start"]), int(meta["end"])))
        else:
            out.append(Piece(doc.page_content))
    return out


def cut(parts: Sequence[Piece], budget: int) -> list[Piece]:
    """Concatenate in rank order and cut at ``budget`` tokens (4 chars each)."""
    left = budget * CHARS_PER_TOKEN
    out = []
    for part in parts:
        if left <= 0:
            break
        if len(part.text) <= left:
            out.append(part)
        else:
            end = None if part.start is None else part.start + left
            out.append(Piece(part.text[:left], part.doc_id, part.start, end))
        left -= len(part.text)
    return out


def _covered(evidence: Span, spans: Sequence[Span]) -> int:
    """Characters of ``evidence`` inside the union of ``spans``."""
    lo, hi = evidence
    total, cursor = 0, lo
    for start, end in sorted(spans):
        start, end = max(start, cursor), min(end, hi)
        if end > start:
            total += end - start
            cursor = end
    return total


@dataclass(frozen=True)
class Score:
    """One question's outcome for one list of returned pieces."""

    hit: bool
    answer: bool
    recall: float | None
    tokens: int


def score(question: Question, parts: Sequence[Piece]) -> Score:
    """Score returned pieces against a question's gold answers and evidence."""
    text = "\n".join(p.text for p in parts).lower()
    answer = any(a.lower() in text for a in question.answers if a)
    tokens = sum(estimate_tokens(p.text) for p in parts)
    if not parts:
        return Score(False, False, 0.0, 0)
    spans = [
        (p.start, p.end)
        for p in parts
        if p.doc_id == question.doc_id and p.start is not None and p.end is not None
    ]
    if any(p.start is None for p in parts) or not question.evidence:
        return Score(answer, answer, None, tokens)
    merged = _union(question.evidence)
    inside = sum(_covered(ev, spans) for ev in merged)
    total = sum(e - s for s, e in merged)
    hit = any(_covered(ev, spans) == ev[1] - ev[0] for ev in question.evidence)
    return Score(hit, answer, inside / total if total else None, tokens)


def _union(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# Running a retriever -----------------------------------------------------------


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
