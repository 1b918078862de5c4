"""The one analyser every lexical engine shares: what a term of a text or a query is.

Text and queries go through :func:`analyze`, whatever the store (tantivy,
Postgres full text, FTS5): Unicode NFKC and case folding (final ``ς``, ``ß`` fold as the Unicode
standard says; ``İ`` folds to ``i``), then tantivy's regex tokenizer: a run of letters,
marks and digits is a word, and a character of a script written without
spaces (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) is a word of its
own. The tantivy field indexes with that very analyser, and a query's terms
are what the same analyser makes of it, so an indexed word is always found
(Hindi vowel signs stay in their word, a Chinese word is found by its
characters). Every term is an optional clause, so the score is BM25
(k1 = 1.2, b = 0.75).
"""

from __future__ import annotations

import unicodedata
from functools import cache
from typing import Any

_ANALYZER = "s2b_words"
WORDS = (
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]"
    r"|[\p{L}\p{M}\p{N}]+"
)
"""What one term is (a regular expression, in tantivy's syntax)."""


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError:
        msg = "Hybrid search needs tantivy: pip install tantivy"
        raise ImportError(msg) from None
    return tantivy


@cache
def _analyzer() -> Any:
    tantivy = _tantivy()
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(WORDS))
    return builder.filter(tantivy.Filter.lowercase()).build()


def fold(text: str) -> str:
    """``text`` as the analyser reads it: NFKC, case-folded, lone surrogates as ``?``.

    The dot that case folding leaves on a capital ``İ`` (``i`` + U+0307) goes
    too, so ``İstanbul`` and ``istanbul`` are one word.
    """
    return unicodedata.normalize("NFKC", _well_formed(text)).casefold().replace("i\u0307", "i")


def analyze(text: str) -> list[str]:
    """The terms of ``text``, in order, as the lexical index makes them (text and queries)."""
    terms: list[str] = _analyzer().analyze(fold(text))
    return terms


def query_terms(query: str) -> list[str]:
    """The query's distinct terms, in order."""
    return list(dict.fromkeys(analyze(query)))


def source_of(key: str) -> str:
    """The (generation) source key a leaf key starts with."""
    return key.split("/", 1)[0]


def _well_formed(text: str) -> str:
    """``text`` with lone surrogates (not encodable, never letters) replaced by ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")
