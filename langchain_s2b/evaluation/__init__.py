"""Retrieval evaluation: hit rate, evidence recall, context tokens, budgets, baselines.

Works for any LangChain retriever; see :mod:`~langchain_s2b.evaluation.data`
for the dataset format, :mod:`~langchain_s2b.evaluation.scoring` for the
metrics and :mod:`~langchain_s2b.evaluation.runs` for the budget rules.
"""

from langchain_s2b.evaluation.baselines import header_rows
from langchain_s2b.evaluation.data import Question, load_documents, load_questions
from langchain_s2b.evaluation.runs import (
    BUDGETS,
    MAX_K,
    METRICS,
    RULES,
    BudgetStats,
    Report,
    budget_table,
    can_be_told,
    compare,
    evaluate,
    fill_budget,
    invoke_with_k,
    markdown_table,
)
from langchain_s2b.evaluation.scoring import (
    Piece,
    Score,
    cut,
    pieces,
    score,
    whitespace_tokens,
)

__all__ = [
    "BUDGETS",
    "MAX_K",
    "METRICS",
    "BudgetStats",
    "Piece",
    "Question",
    "RULES",
    "Report",
    "Score",
    "budget_table",
    "can_be_told",
    "compare",
    "cut",
    "evaluate",
    "fill_budget",
    "header_rows",
    "invoke_with_k",
    "load_documents",
    "load_questions",
    "markdown_table",
    "pieces",
    "score",
    "whitespace_tokens",
]
