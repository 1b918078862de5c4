"""Small-to-big retrieval for LangChain: search small children, return big context."""

from langchain_s2b.index import FaissIndex
from langchain_s2b.ingest import IndexingResult
from langchain_s2b.retrievers import SmallToBigRetriever
from langchain_s2b.splitters import SentenceSplitter
from langchain_s2b.splitting import Level, estimate_tokens
from langchain_s2b.stores import DocumentCodecStore
from langchain_s2b.window_splitter import WindowSplitter
from langchain_s2b.windows import SentenceWindowExpander

__version__ = "0.1.0"

__all__ = [
    "DocumentCodecStore",
    "FaissIndex",
    "IndexingResult",
    "Level",
    "SentenceSplitter",
    "SentenceWindowExpander",
    "SmallToBigRetriever",
    "WindowSplitter",
    "__version__",
    "estimate_tokens",
]
