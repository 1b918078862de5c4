"""Pure: a document's text -> a tree of spans with addresses.

Levels are a list, finest first; the document itself is always the root
(level ``"doc"``). Each level is split inside the spans of the level above, so
every node nests in exactly one parent, and the spans of a level tile the text:
a gap a splitter leaves (stripped whitespace) joins the span before it, so no
character is outside a leaf and merged windows equal source slices.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from langchain_text_splitters import RecursiveCharacterTextSplitter, TextSplitter

from langchain_s2b.keys import check_level_name, node_key

DOC_LEVEL = "doc"
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Offline token estimate: one token per four characters, rounded up.

    This is the usual rule of thumb for English with BPE tokenizers (GPT,
    BERT word pieces land within ~20%); it needs no download and is what every
    budget in this package counts.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


@runtime_checkable
class SpanSplitter(Protocol):
    """A splitter that returns exact ``(start, end)`` spans instead of strings."""

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of ``text``, in order."""


Splitter = TextSplitter | SpanSplitter | Callable[[str], list[str]]


@dataclass(frozen=True)
class Level:
    """One level of the tree: its name and the splitter that makes its spans."""

    name: str
    splitter: Splitter

    def __post_init__(self) -> None:
        check_level_name(self.name)
        if self.name == DOC_LEVEL:
            msg = f"{DOC_LEVEL!r} is the implicit root level; name levels below it."
            raise ValueError(msg)


@dataclass(frozen=True)
class Node:
    """One span of a source text at one level."""

    source_key: str
    level: str
    split_id: int
    start: int
    end: int
    parent_key: str | None
    ancestors: tuple[tuple[str, int, int, int], ...] = ()
    """``(key, start, end, n_children)`` of every enclosing node, nearest first."""
    children: tuple[int, int] | None = None
    """``[first, last)`` split ids of this node's children, if it has any."""

    @property
    def key(self) -> str:
        """This node's address."""
        return node_key(self.source_key, self.level, self.split_id)


@dataclass
class Tree:
    """All nodes of one source, one list per level, finest level first."""

    levels: list[str]
    nodes: dict[str, list[Node]] = field(default_factory=dict)

    @property
    def leaves(self) -> list[Node]:
        """The finest level: the only one that is embedded."""
        return self.nodes[self.levels[0]]


def locate_chunks(text: str, chunks: Sequence[str]) -> list[tuple[int, int]]:
    """Find each chunk in ``text``, in order, allowing overlap between chunks."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for chunk in chunks:
        if not chunk:
            continue
        start = text.find(chunk, cursor)
        if start < 0:
            start = text.find(chunk)
        if start < 0:
            msg = (
                "The splitter returned a chunk that is not a substring of its input, "
                f"so its offsets cannot be known: {chunk[:60]!r}. Use a splitter "
                "that keeps the text as it is (no header stripping, no rewriting)."
            )
            raise ValueError(msg)
        spans.append((start, start + len(chunk)))
        cursor = start + 1
    return spans


def tile(spans: Sequence[tuple[int, int]], length: int) -> list[tuple[int, int]]:
    """Stretch spans so that together they cover ``[0, length)`` with no gap."""
    ordered = sorted(set(spans))
    if not ordered:
        return [(0, length)] if length else []
    out: list[tuple[int, int]] = []
    for i, (start, end) in enumerate(ordered):
        nxt = ordered[i + 1][0] if i + 1 < len(ordered) else length
        begin = 0 if i == 0 else start
        out.append((begin, max(end, nxt)))
    return out


def split_spans(splitter: Splitter, text: str) -> list[tuple[int, int]]:
    """Exact spans of ``text`` from any kind of splitter, tiled."""
    if isinstance(splitter, SpanSplitter):
        raw = splitter.split_spans(text)
    elif isinstance(splitter, TextSplitter):
        raw = locate_chunks(text, splitter.split_text(text))
    else:
        raw = locate_chunks(text, splitter(text))
    return tile(raw, len(text))


def build_tree(text: str, source_key: str, levels: Sequence[Level]) -> Tree:
    """Split ``text`` into nested spans, one level inside the next."""
    names = [level.name for level in levels]
    if len(set(names)) != len(names):
        msg = f"Level names must be distinct; got {names}."
        raise ValueError(msg)
    root = Node(source_key, DOC_LEVEL, 0, 0, len(text), None)
    tree = Tree(levels=[*names, DOC_LEVEL], nodes={DOC_LEVEL: [root]})
    parents = [root]
    for level in reversed(levels):
        nodes: list[Node] = []
        for p_index, parent in enumerate(parents):
            first = len(nodes)
            spans = split_spans(level.splitter, text[parent.start : parent.end])
            ancestry = ((parent.key, parent.start, parent.end, len(spans)), *parent.ancestors)
            for start, end in spans:
                nodes.append(
                    Node(
                        source_key,
                        level.name,
                        len(nodes),
                        parent.start + start,
                        parent.start + end,
                        parent.key,
                        ancestry,
                    )
                )
            parents[p_index] = replace(parent, children=(first, len(nodes)))
        tree.nodes[parents[0].level] = parents
        tree.nodes[level.name] = nodes
        parents = nodes
    return tree


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
_SENTENCE_END = re.compile(
    rf"[.!?\u2026]+[{_QUOTES})\]]*(?=\s)"
    r"|\n\s*\n|\n(?=[ \t]*#{1,6}[ \t])|(?m:^[ \t]*#{1,6}[ \t][^\n]*)"
)


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
        self._fallback = RecursiveCharacterTextSplitter(
            chunk_size=max_tokens, chunk_overlap=0, length_function=estimate_tokens
        )
        self.max_tokens = max_tokens

    def split_spans(self, text: str) -> list[tuple[int, int]]:
        """Sentence spans of ``text`` (whitespace between them left out)."""
        spans: list[tuple[int, int]] = []
        start = 0
        for match in _SENTENCE_END.finditer(text):
            token = match.group()
            if token.lstrip().startswith("#"):
                self._emit(text, start, match.start(), spans)
                self._emit(text, match.start(), match.end(), spans)
            elif token.strip() and _is_abbreviation(text, match.start()):
                continue
            else:
                self._emit(text, start, match.end() if token.strip() else match.start(), spans)
            start = match.end()
        self._emit(text, start, len(text), spans)
        return spans

    def _emit(self, text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
        piece = text[start:end]
        stripped = piece.strip()
        if not stripped:
            return
        begin = start + piece.index(stripped[0])
        finish = begin + len(stripped)
        if estimate_tokens(stripped) <= self.max_tokens:
            spans.append((begin, finish))
            return
        for a, b in locate_chunks(stripped, self._fallback.split_text(stripped)):
            spans.append((begin + a, begin + b))

    def split_text(self, text: str) -> list[str]:
        """Sentences of ``text``."""
        return [text[a:b] for a, b in self.split_spans(text)]


def _is_abbreviation(text: str, dot: int) -> bool:
    """True when the period at ``dot`` ends an abbreviation, initial or number."""
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
    """A recursive character splitter whose size is counted in estimated tokens."""
    return RecursiveCharacterTextSplitter(
        chunk_size=chunk_tokens,
        chunk_overlap=overlap_tokens,
        length_function=estimate_tokens,
    )


def check_levels(levels: Sequence[Level]) -> list[Level]:
    """Reject an empty list, repeated names, or a level larger than the one above."""
    if not levels:
        msg = "levels must name at least one level (the embedded one)."
        raise ValueError(msg)
    names = [level.name for level in levels]
    if len(set(names)) != len(names):
        msg = f"Level names must be distinct; got {names}."
        raise ValueError(msg)
    for finer, coarser in itertools.pairwise(levels):
        small = getattr(finer.splitter, "_chunk_size", None)
        big = getattr(coarser.splitter, "_chunk_size", None)
        if small is not None and big is not None and small > big:
            msg = (
                f"The {finer.name!r} splitter's chunk_size ({small}) is larger than the "
                f"{coarser.name!r} splitter's ({big}); children must be smaller than parents."
            )
            raise ValueError(msg)
    return list(levels)


def default_levels(mode: str, child: Splitter | None, parent: Splitter | None) -> list[Level]:
    """The default tree for a mode; ``child``/``parent`` replace those levels."""
    if mode == "window":
        return [Level("sentence", child or SentenceSplitter())]
    if mode == "multilevel":
        return [
            Level("sentence", child or SentenceSplitter()),
            Level("paragraph", paragraph_splitter()),
            Level("section", parent or section_splitter()),
        ]
    return [
        Level("child", child or size_splitter(300)),
        Level("parent", parent or section_splitter(1200)),
    ]
