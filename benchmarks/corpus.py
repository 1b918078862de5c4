"""Benchmark data: real-looking text at any size, and a cheap embedding.

The 16 SQuAD 2.0 dev articles (``examples/data/squad2-dev``, CC BY-SA 4.0, or
``$S2B_BENCH_DATA``) are the seed. Bigger corpora are synthesised from their
paragraphs: each synthetic article draws ~40 paragraphs at random and replaces
``swap`` of the alphabetic words with other words of the corpus vocabulary, so
every child text (and so every vector) is distinct while the sentences keep
the articles' punctuation, lengths and word statistics.

``HashEmbedding`` is a bag-of-words feature-hashing embedding (two hashed
dimensions per lower-cased word, signed, L2-normalised): texts that share
words are near each other, queries and documents use the same function
(``embed_query == embed_documents`` semantics, like ``DeterministicFakeEmbedding``),
and it embeds ~1M sentences a minute in pure Python + numpy, so the model is
never the bottleneck.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

_BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "data" / "squad2-dev"
DATA = Path(os.environ.get("S2B_BENCH_DATA", _BUNDLED))
_WORD = re.compile(r"\w+")


def load_articles() -> list[dict[str, str]]:
    """The seed articles: ``{"id", "title", "text"}``."""
    path = DATA / "documents.jsonl"
    if not path.exists():
        msg = f"Benchmark data not found: {path}. Set S2B_BENCH_DATA to the dev-set folder."
        raise FileNotFoundError(msg)
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def load_questions(limit: int | None = None) -> list[str]:
    """SQuAD questions (real queries for the seed articles)."""
    out = []
    with (DATA / "questions.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["question"])
            if limit is not None and len(out) >= limit:
                break
    return out


class Synthesiser:
    """Makes distinct, real-looking articles from the seed paragraphs."""

    def __init__(self, swap: float = 0.15, seed: int = 7) -> None:
        articles = load_articles()
        paragraphs = [p for a in articles for p in a["text"].split("\n\n") if p.strip()]
        self.tokens = [np.array(p.split(" "), dtype=object) for p in paragraphs]
        self.alpha = [np.array([t.isalpha() for t in toks]) for toks in self.tokens]
        vocab = sorted({t for toks in self.tokens for t in toks if t.isalpha()})
        self.vocab = np.array(vocab, dtype=object)
        self.swap = swap
        self.rng = np.random.default_rng(seed)
        self.seed_articles = articles

    def article(self, n_paragraphs: int = 40) -> str:
        """One synthetic article: paragraphs joined by blank lines."""
        rng = self.rng
        parts = []
        for i in rng.integers(0, len(self.tokens), n_paragraphs):
            toks, alpha = self.tokens[i], self.alpha[i]
            mask = alpha & (rng.random(len(toks)) < self.swap)
            new = toks.copy()
            new[mask] = self.vocab[rng.integers(0, len(self.vocab), int(mask.sum()))]
            parts.append(" ".join(new.tolist()))
        return "\n\n".join(parts)

    def documents(self, n_docs: int, start: int = 0) -> Iterator[Document]:
        """The seed articles first (unchanged), then synthetic ones."""
        for i in range(start, start + n_docs):
            if i < len(self.seed_articles):
                art = self.seed_articles[i]
                yield Document(
                    page_content=art["text"], id=art["id"], metadata={"title": art["title"]}
                )
            else:
                yield Document(
                    page_content=self.article(), id=f"syn-{i}", metadata={"title": f"syn {i}"}
                )


class HashEmbedding(Embeddings):
    """Bag-of-words feature hashing into ``size`` dims (see the module docstring)."""

    def __init__(self, size: int = 384) -> None:
        self.size = size
        self._slots: dict[str, tuple[int, int, float, float]] = {}
        self.seconds = 0.0
        """Wall time spent embedding (to subtract from ingest timings)."""
        self.cpu_seconds = 0.0
        """Process CPU time spent embedding."""

    def _slot(self, word: str) -> tuple[int, int, float, float]:
        slot = self._slots.get(word)
        if slot is None:
            h = zlib.crc32(word.encode("utf-8"))
            g = zlib.crc32(word.encode("utf-8"), 0x9E3779B9)
            slot = (
                h % self.size,
                g % self.size,
                1.0 if h & 1 << 31 else -1.0,
                1.0 if g & 1 << 31 else -1.0,
            )
            self._slots[word] = slot
        return slot

    def matrix(self, texts: list[str]) -> np.ndarray:
        """Embed texts as a float32 matrix, one row per text."""
        t0, c0 = time.perf_counter(), time.process_time()
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        slot = self._slot
        for r, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                a, b, sa, sb = slot(word)
                rows += (r, r)
                cols += (a, b)
                vals += (sa, sb)
        out = np.zeros((len(texts), self.size), dtype=np.float32)
        np.add.at(out, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)), vals)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.where(norms > 0, norms, 1)
        out[norms[:, 0] == 0, 0] = 1.0
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.matrix(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.matrix([text])[0].tolist()

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Queries are embedded like documents: one batched call."""
        return self.matrix(texts).tolist()


class CachedQueryEmbedding(Embeddings):
    """Looks query vectors up in a precomputed table: embedding cost ~0.

    Used to time the retriever *excluding* the query embedding.
    """

    def __init__(self, inner: Embeddings, table: dict[str, list[float]]) -> None:
        self.inner = inner
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        found = self.table.get(text)
        return found if found is not None else self.inner.embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]
