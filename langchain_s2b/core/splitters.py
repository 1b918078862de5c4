"""Offline splitters (sentences, paragraphs, sections, sizes) and their JSON form.

All sizes count estimated tokens (:func:`~langchain_s2b.core.budget.estimate_tokens`),
so nothing here downloads a tokenizer. :func:`describe_splitter` and
:func:`build_splitter` turn the built-in splitters into JSON and back, so a
saved index can rebuild its levels without pickle.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from langchain_text_splitters import RecursiveCharacterTextSplitter, TextSplitter

from langchain_s2b.core.budget import CHARS_PER_TOKEN, estimate_tokens
from langchain_s2b.core.tree import Level, Splitter, locate_chunks

# Offline splitters -------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "cf",
        "al",
        "fig",
        "no",
        "vol",
        "ca",
        "approx",
        "inc",
        "ltd",
        "co",
        "corp",
        "dept",
        "est",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "u.k",
    ]
)
_QUOTES = "\"'\u201c\u201d\u2018\u2019"
_HEADING = r"[ \t]*#{1,6}[ \t][^\n]*"
_SENTENCE_END = re.compile(
    rf"[.!?\u2026\n](?:(?<=[.!?\u2026])[.!?\u2026]*[{_QUOTES})\]]*(?=\s)"
    rf"|(?<=\n)(?:\s*\n|(?=[ \t]*#{{1,6}}[ \t]))(?P<head>{_HEADING})?)"
)
"""One pass finds every candidate boundary: a run of sentence-ending punctuation
followed by whitespace, or a blank line or the newline before a Markdown
heading, with the heading line that follows. Every match starts with one of
``.!?…`` or a newline, as the pattern's first item, a character class: the
engine skips to the next of those characters in C instead of trying the
pattern at every position (a leading look-ahead would not let it)."""
_FIRST_HEADING = re.compile(_HEADING)
_OPENERS = "(" + _QUOTES
_ENDERS = frozenset(".!?\u2026")


class SentenceSplitter(TextSplitter):
    """Offline rule-based sentence splitter (no NLTK, no download).

    Ends a sentence at ``.``, ``!``, ``?`` (and closing quotes or brackets)
    followed by whitespace, and at blank lines; skips common abbreviations,
    initials and decimal numbers. A sentence longer than ``max_tokens`` is
    split further by size so it fits the embedding model's input window.
    """

    def __init__(self, max_tokens: int = 200, **kwargs: Any) -> None:
        kwargs.setdefault("chunk_size", max_tokens)
        kwargs.setdefault("chunk_overlap", 0)
        kwargs.setdefault("length_function", estimate_tokens)
        super().__init__(**kwargs)
        self._fallback = size_splitter(max_tokens)
        self.max_tokens = max_tokens

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        """Sentence spans of ``text`` (whitespace between them left out)."""
        spans: list[tuple[int, int]] = []
        emit = self._emit
        start = 0
        first = _FIRST_HEADING.match(text)
        if first:  # a heading line is a sentence of its own
            emit(text, 0, first.end(), spans)
            start = first.end()
        enders = _ENDERS
        for match in _SENTENCE_END.finditer(text, start):
            dot = match.start()
            if text[dot] in enders:  # a sentence ends unless this is an abbreviation
                if text[dot] == "." and _is_abbreviation(text, dot):
                    continue
                emit(text, start, match.end(), spans)
            else:  # a blank line, or a newline before a heading line
                emit(text, start, dot, spans)
                if match.start("head") >= 0:
                    emit(text, match.start("head"), match.end(), spans)
            start = match.end()
        emit(text, start, len(text), spans)
        return spans

    def _emit(self, text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
        piece = text[start:end]
        stripped = piece.strip()
        if not stripped:
            return
        begin = start + len(piece) - len(piece.lstrip())
        if estimate_tokens(stripped) <= self.max_tokens:
            spans.append((begin, begin + len(stripped)))
            return
        for a, b in locate_chunks(stripped, self._fallback.split_text(stripped)):
            spans.append((begin + a, begin + b))

    def split_text(self, text: str) -> list[str]:
        """Sentences of ``text``."""
        return [text[a:b] for a, b in self.split_spans(text)]


def _is_abbreviation(text: str, dot: int) -> bool:
    """True when the period at ``dot`` ends an abbreviation, initial or number."""
    word_start = dot
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:dot].lstrip(_OPENERS).lower()
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return True
    after = text[dot + 1 : dot + 3].lstrip()
    return bool(after) and after[0].islower()


class BlockSplitter(TextSplitter):
    """Splits on the text's own structure, then by size.

    ``boundary`` is a regex whose matches end a block (the whitespace around
    a blank line for paragraphs, an empty match before a Markdown heading). A
    block larger than ``chunk_size`` tokens (estimated offline) is split by a
    recursive character splitter. With ``pack``, consecutive small blocks are
    joined up to ``chunk_size``. Without any boundary in the text it is a pure
    size splitter.
    """

    def __init__(self, boundary: str, chunk_size: int, *, pack: bool, **kwargs: Any) -> None:
        kwargs.setdefault("chunk_overlap", 0)
        kwargs.setdefault("length_function", estimate_tokens)
        super().__init__(chunk_size=chunk_size, **kwargs)
        self._boundary = re.compile(boundary, re.MULTILINE)
        self._max = chunk_size
        self._pack = pack
        self._fallback = size_splitter(chunk_size)

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        """Block spans of ``text``."""
        cuts = sorted({0, *(m.end() for m in self._boundary.finditer(text)), len(text)})
        blocks = [(a, b) for a, b in itertools.pairwise(cuts) if text[a:b].strip()]
        spans: list[tuple[int, int]] = []
        for start, end in blocks:
            if estimate_tokens(text[start:end]) > self._max:
                pieces = locate_chunks(text[start:end], self._fallback.split_text(text[start:end]))
                spans.extend((start + a, start + b) for a, b in pieces)
            elif self._pack and spans and estimate_tokens(text[spans[-1][0] : end]) <= self._max:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def split_text(self, text: str) -> list[str]:
        """Blocks of ``text``."""
        return [text[a:b] for a, b in self.split_spans(text)]


class SectionSplitter(TextSplitter):
    """Markdown sections, or paragraphs packed up to ``chunk_size`` tokens.

    A Markdown heading starts a section; a text without headings (or an
    oversized section) is cut into packs of whole paragraphs.
    """

    def __init__(self, chunk_size: int = 1200, **kwargs: Any) -> None:
        kwargs.setdefault("chunk_overlap", 0)
        kwargs.setdefault("length_function", estimate_tokens)
        super().__init__(chunk_size=chunk_size, **kwargs)
        self._headings = BlockSplitter(SECTION_BOUNDARY, 10**9, pack=False)
        self._packer = BlockSplitter(PARAGRAPH_BOUNDARY, chunk_size, pack=True)

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        """Section spans of ``text``."""
        spans: list[tuple[int, int]] = []
        for start, end in self._headings.split_spans(text):
            inner = self._packer.split_spans(text[start:end])
            spans.extend((start + a, start + b) for a, b in inner)
        return spans

    def split_text(self, text: str) -> list[str]:
        """Sections of ``text``."""
        return [text[a:b] for a, b in self.split_spans(text)]


PARAGRAPH_BOUNDARY = r"\n[ \t]*\n\s*|^(?=[ \t]*#{1,6}[ \t])"
SECTION_BOUNDARY = r"^(?=[ \t]*#{1,6}[ \t])"


def paragraph_splitter(max_tokens: int = 400) -> BlockSplitter:
    """Blank-line paragraphs (a heading starts one too); long ones split by size."""
    return BlockSplitter(PARAGRAPH_BOUNDARY, max_tokens, pack=False)


def section_splitter(max_tokens: int = 1200) -> SectionSplitter:
    """Markdown sections, or paragraphs packed up to ``max_tokens``."""
    return SectionSplitter(max_tokens)


def size_splitter(chunk_tokens: int, overlap_tokens: int = 0) -> TextSplitter:
    """A recursive character splitter of ``chunk_tokens`` estimated tokens per chunk.

    The size is set in characters (``CHARS_PER_TOKEN`` per estimated token), so
    a chunk of at most ``chunk_tokens`` tokens as :func:`estimate_tokens` counts
    a whole text. Counting with ``estimate_tokens`` itself would be wrong here:
    the splitter adds up the lengths of the pieces it merges, and a rounded-up
    estimate counts every piece, down to a single character, as a token (a
    word without spaces was cut every ``chunk_tokens`` characters, and chunks
    came out ~35% below their size).
    """
    return RecursiveCharacterTextSplitter(
        chunk_size=chunk_tokens * CHARS_PER_TOKEN,
        chunk_overlap=overlap_tokens * CHARS_PER_TOKEN,
        length_function=len,
    )


def default_levels(mode: str, child: Splitter | None, parent: Splitter | None) -> list[Level]:
    """The default tree for a mode; ``child``/``parent`` replace those levels.

    Window, multilevel and pack mode share one tree, sentences in paragraphs in
    sections (window mode reads only the sentences; paragraphs and sections are
    spans, not vectors), so any mode works per call on it. Window mode takes no
    ``parent`` splitter.
    """
    if mode in ("window", "multilevel", "pack"):
        return [
            Level("sentence", child or SentenceSplitter()),
            Level("paragraph", paragraph_splitter()),
            Level("section", (parent if mode != "window" else None) or section_splitter()),
        ]
    return [
        Level("child", child or size_splitter(300)),
        Level("parent", parent or section_splitter(1200)),
    ]


_BOUNDARIES = {"paragraph": PARAGRAPH_BOUNDARY, "section": SECTION_BOUNDARY}


def _class_name(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


# Splitters as JSON --------------------------------------------------------------------


def describe_splitter(level: Level) -> dict[str, Any]:
    """A JSON description of a built-in splitter, or ``{"kind": "custom", ...}``."""
    sp: Any = level.splitter
    kind = type(sp)
    if kind is SentenceSplitter:
        return {"kind": "sentence", "max_tokens": sp.max_tokens}
    if kind is SectionSplitter:
        return {"kind": "section", "chunk_size": sp._chunk_size}
    boundary = getattr(sp, "_boundary", None)
    names = {v: k for k, v in _BOUNDARIES.items()}
    if kind is BlockSplitter and boundary is not None and boundary.pattern in names:
        return {
            "kind": "block",
            "boundary": names[boundary.pattern],
            "chunk_size": sp._max,
            "pack": sp._pack,
        }
    if kind is RecursiveCharacterTextSplitter and not sp._is_separator_regex:
        length = {estimate_tokens: "tokens", len: "chars"}.get(sp._length_function)
        if length is not None and isinstance(sp._keep_separator, bool | str):
            return {
                "kind": "recursive",
                "chunk_size": sp._chunk_size,
                "chunk_overlap": sp._chunk_overlap,
                "length": length,
                "separators": list(sp._separators),
                "keep_separator": sp._keep_separator,
                "strip_whitespace": sp._strip_whitespace,
            }
    return {"kind": "custom", "class": _class_name(sp)}


def build_splitter(spec: Mapping[str, Any], level: str) -> Any:
    """Rebuild a splitter from :func:`describe_splitter`'s description."""
    kind = spec.get("kind")
    try:
        if kind == "sentence":
            return SentenceSplitter(_pos(spec["max_tokens"]))
        if kind == "section":
            return SectionSplitter(_pos(spec["chunk_size"]))
        if kind == "block":
            pack = spec["pack"]
            if not isinstance(pack, bool):
                raise TypeError
            return BlockSplitter(_BOUNDARIES[spec["boundary"]], _pos(spec["chunk_size"]), pack=pack)
        if kind == "recursive":
            return _build_recursive(spec)
    except (KeyError, TypeError, ValueError):
        msg = f"Level {level!r}: the saved splitter {dict(spec)!r} is malformed."
        raise ValueError(msg) from None
    msg = (
        f"Level {level!r} was split by a custom splitter ({spec.get('class', kind)!r}) "
        f"that can not be rebuilt from JSON; pass it again: "
        f"load(path, embedding, splitters={{{level!r}: <the splitter>}})."
    )
    raise ValueError(msg)


def _build_recursive(spec: Mapping[str, Any]) -> RecursiveCharacterTextSplitter:
    separators, keep = spec["separators"], spec["keep_separator"]
    if not isinstance(separators, list) or not all(isinstance(s, str) for s in separators):
        raise TypeError
    if keep not in (True, False, "start", "end") or not isinstance(spec["strip_whitespace"], bool):
        raise TypeError
    return RecursiveCharacterTextSplitter(
        separators=separators,
        keep_separator=keep,
        chunk_size=_pos(spec["chunk_size"]),
        chunk_overlap=_nonneg(spec["chunk_overlap"]),
        length_function={"tokens": estimate_tokens, "chars": len}[spec["length"]],
        strip_whitespace=spec["strip_whitespace"],
    )


def _pos(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError
    return value


def _nonneg(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError
    return value
