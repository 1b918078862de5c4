"""Small-to-big retrieval for LangChain: search small children, return big context.

The public names load on first use (PEP 562), so ``import langchain_s2b.core``
stays free of FAISS and of every store.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_s2b.core.budget import estimate_tokens
    from langchain_s2b.core.ingest import IndexingResult
    from langchain_s2b.core.proxies import Proxy
    from langchain_s2b.core.splitters import SentenceSplitter
    from langchain_s2b.core.tree import Level
    from langchain_s2b.expander import SentenceWindowExpander, WindowSplitter
    from langchain_s2b.retriever import SmallToBigRetriever
    from langchain_s2b.store.nodes import DocumentCodecStore
    from langchain_s2b.store.vectors import FaissIndex

__version__ = "0.1.0"

__all__ = [
    "DocumentCodecStore",
    "FaissIndex",
    "IndexingResult",
    "Level",
    "Proxy",
    "SentenceSplitter",
    "SentenceWindowExpander",
    "SmallToBigRetriever",
    "WindowSplitter",
    "__version__",
    "estimate_tokens",
]

_HOMES = {
    "DocumentCodecStore": "langchain_s2b.store.nodes",
    "FaissIndex": "langchain_s2b.store.vectors",
    "IndexingResult": "langchain_s2b.core.ingest",
    "Level": "langchain_s2b.core.tree",
    "Proxy": "langchain_s2b.core.proxies",
    "SentenceSplitter": "langchain_s2b.core.splitters",
    "SentenceWindowExpander": "langchain_s2b.expander",
    "SmallToBigRetriever": "langchain_s2b.retriever",
    "WindowSplitter": "langchain_s2b.expander",
    "estimate_tokens": "langchain_s2b.core.budget",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'langchain_s2b' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
