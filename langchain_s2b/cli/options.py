"""The command line's choices and defaults, without importing what the commands need.

``s2b --version``, ``s2b --help`` and ``s2b list`` import only what they use:
the parser reads its choices here (the modes from :mod:`langchain_s2b.core.params`,
which imports nothing heavy), and each command's module is imported when that
command runs (:mod:`langchain_s2b.cli.commands`).
"""

from __future__ import annotations

from langchain_s2b.core.params import DEFAULT_K as DEFAULT_RESULTS
from langchain_s2b.core.params import MODES, QueryParams

__all__ = [
    "BUDGETS",
    "COUNTERS",
    "DEFAULT_COUNTER",
    "DEFAULT_K",
    "DEFAULT_MODE",
    "EMBEDDING_ENV",
    "INDEX_MODE",
    "MAX_K",
    "MODES",
    "PARENT_LEVEL",
    "PARENT_LEVELS",
    "PROXY_CHOICES",
    "TOKEN_ENV",
]

INDEX_MODE = "multilevel"
"""The tree the CLI builds: sentences < paragraphs < sections < document."""
PARENT_LEVELS = ("paragraph", "section", "doc")
PARENT_LEVEL = "section"
"""Parent mode returns sections: about the size of the Python API's default parents (~1,200
tokens), where the tree's nearest parent, a paragraph, is often one line of a real document."""
_DEFAULTS = QueryParams()
DEFAULT_K = DEFAULT_RESULTS
"""Results without ``--max-tokens``; with it, ``-k`` is a cap and its default is as many as fit."""
MAX_K = 100
"""The most results one query may ask for (``s2b query -k``, ``search``'s ``k``): 100
sections are already about 120,000 tokens; a larger ``k`` only costs time and memory."""
DEFAULT_MODE = "pack"
"""``s2b query``'s and ``s2b serve``'s mode: the evidence and its neighbours packed by value
(1,024 tokens unless ``--max-tokens`` says otherwise). Told a budget it beat every other mode at
every budget on the dev set with both benchmark models (README, Evaluation); the Python API
keeps ``parent``, LangChain's parent-document default."""
COUNTERS = ("approximate", "words")
"""``--token-counter`` choices: LangChain's ``count_tokens_approximately``, or words."""
DEFAULT_COUNTER = "approximate"
BUDGETS = (256, 512, 1024, 2048, 8192)
"""``s2b eval``'s default budgets (``langchain_s2b.evaluation.BUDGETS``)."""
EMBEDDING_ENV = "S2B_EMBEDDING"
"""The store's embedding, when ``--embedding`` is not given (empty means unset)."""
PROXY_CHOICES = ("propositions", "summaries", "questions")
"""``s2b index --proxies`` choices (``langchain_s2b.core.propose.PROXY_KINDS``)."""
TOKEN_ENV = "S2B_TOKEN"  # noqa: S105 (the name of a variable, not a secret)
"""The bearer token of ``s2b serve --http``, when ``--token`` is not given."""
