"""A tiny bag-of-words embedding: texts sharing words with the query score high."""

from __future__ import annotations

import re
import zlib

from langchain_core.embeddings import Embeddings


class BagOfWords(Embeddings):
    """Counts hashed lower-case words into ``size`` buckets (deterministic, offline)."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.calls = 0

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in re.findall(r"\w+", text.lower()):
            vec[zlib.crc32(word.encode()) % self.size] += 1.0
        if not any(vec):
            vec[0] = 1e-3
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return self._one(text)


class ExactWords(Embeddings):
    """One dimension per distinct lower-case word (no hashing, so no collisions).

    A text that shares no word with the query scores exactly 0, and a text
    sharing ``s`` of its ``n`` distinct words with a query of ``m`` distinct
    words scores ``s / sqrt(n * m)`` (each word counted once per text). Words
    get their dimension in the order they are first seen.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.vocabulary: dict[str, int] = {}

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in set(re.findall(r"\w+", text.lower())):
            index = self.vocabulary.setdefault(word, len(self.vocabulary) + 1)
            vec[index % self.size] = 1.0
        if not any(vec):
            vec[0] = 1.0  # blank text: orthogonal to every query
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)
