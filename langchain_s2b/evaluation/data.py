"""The dataset: documents and questions with gold answers and evidence spans (JSONL).

The format is the one of ``squad2-dev-articles``: ``documents.jsonl`` rows
``{"id", "title", "text"}`` and ``questions.jsonl`` rows ``{"id", "question",
"answers", "doc_id", "evidence": [{"start", "end"}], "paragraph": {"start",
"end"}}`` with ``[start, end)`` character offsets into the document text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

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
