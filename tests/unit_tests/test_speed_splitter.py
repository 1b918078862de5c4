"""The one-pass SentenceSplitter cuts exactly where the previous candidate-by-candidate one did."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.splitters import _ABBREVIATIONS, _QUOTES, SentenceSplitter
from langchain_s2b.core.tree import locate_chunks

# The splitter as it was before the speed work (issue 14), kept as the reference.
_OLD_END = re.compile(
    rf"[.!?\u2026]+[{_QUOTES})\]]*(?=\s)"
    r"|\n\s*\n|\n(?=[ \t]*#{1,6}[ \t])|(?m:^[ \t]*#{1,6}[ \t][^\n]*)"
)


def _old_abbreviation(text: str, dot: int) -> bool:
    if text[dot] != ".":
        return False
    word_start = dot
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:dot].lstrip("(" + _QUOTES).lower()
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    after = text[dot + 1 : dot + 3].lstrip()
    return bool(after) and after[0].islower()


def old_spans(splitter: SentenceSplitter, text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []

    def emit(start: int, end: int) -> None:
        piece = text[start:end]
        stripped = piece.strip()
        if not stripped:
            return
        begin = start + piece.index(stripped[0])
        if estimate_tokens(stripped) <= splitter.max_tokens:
            spans.append((begin, begin + len(stripped)))
            return
        for a, b in locate_chunks(stripped, splitter._fallback.split_text(stripped)):
            spans.append((begin + a, begin + b))

    start = 0
    for match in _OLD_END.finditer(text):
        token = match.group()
        if token.lstrip().startswith("#"):
            emit(start, match.start())
            emit(match.start(), match.end())
        elif token.strip() and _old_abbreviation(text, match.start()):
            continue
        else:
            emit(start, match.end() if token.strip() else match.start())
        start = match.end()
    emit(start, len(text))
    return spans


PIECES = [
    "Dr.",
    "e.g.",
    "U.S.",
    "x.",
    "A.",
    "3.14",
    "end.",
    "Why?!",
    "wait…",
    "so...",
    '"Quoted."',
    "(paren.)",
    "\u201cCurly.\u201d",
    "#tag.",
    "# Heading",
    "## Two",
    "#Not",
    "word",
    "Word",
    "lower",
    "a",
    "\u00e9t\u00e9.",
    "\u00c9cole",
]
SEPARATORS = [" ", "  ", "\n", "\n\n", "\n \n", "\t", " \n", "\u00a0", "\u2003", "", "\n  "]


@st.composite
def texts(draw: st.DrawFn) -> str:
    n = draw(st.integers(0, 30))
    parts = []
    for _ in range(n):
        parts.append(draw(st.sampled_from(PIECES)))
        parts.append(draw(st.sampled_from(SEPARATORS)))
    return "".join(parts)


@settings(max_examples=400, deadline=None)
@given(text=texts(), max_tokens=st.sampled_from([3, 8, 200]))
def test_same_spans_as_before_on_sentence_like_text(text: str, max_tokens: int) -> None:
    splitter = SentenceSplitter(max_tokens)
    assert splitter.split_spans(text) == old_spans(splitter, text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("aZ.!?#() \t\n\"'\u2026\u00a0e")), max_size=80))
def test_same_spans_as_before_on_any_punctuation(text: str) -> None:
    splitter = SentenceSplitter(5)
    assert splitter.split_spans(text) == old_spans(splitter, text)


def test_worked_example() -> None:
    text = "Dr. Smith arrived. He said e.g. this.\n\n# Notes\nIt works! Done"
    assert SentenceSplitter().split_text(text) == [
        "Dr. Smith arrived.",
        "He said e.g. this.",
        "# Notes",
        "It works!",
        "Done",
    ]
