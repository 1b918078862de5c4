"""The span tree: a document's text -> nested spans with addresses, one list per level.

Levels are a list, finest first; the document itself is always the root
(level ``"doc"``). Each level is split inside the spans of the level above, so
every node nests in exactly one parent, and the spans of a level tile the text:
a gap a splitter leaves (stripped whitespace) joins the span before it, so no
character is outside a leaf and merged windows equal source slices.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
from langchain_text_splitters import TextSplitter

from langchain_s2b.core.budget import CHARS_PER_TOKEN, estimate_tokens
from langchain_s2b.core.headers import HEADING, LEAF_CONTEXT
from langchain_s2b.core.keys import PROXY_LEVEL, check_level_name, node_key

DOC_LEVEL = "doc"
NODE_FIELDS = frozenset(
    {
        "source_id",
        "source_key",
        "level",
        "split_id",
        "start",
        "end",
        "split_idx_start",
        "parent_id",
        "children",
        "ancestors",
        "source_splits",
        HEADING,
        LEAF_CONTEXT,
    }
)
"""The metadata fields ingestion writes on a node; the rest is its source's own."""


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
        if self.name == PROXY_LEVEL:
            msg = f"{PROXY_LEVEL!r} is reserved for proxies' keys; name the level otherwise."
            raise ValueError(msg)


class Node(NamedTuple):
    """One span of a source text at one level (a named tuple: ingest builds one per span)."""

    source_key: str
    level: str
    split_id: int
    start: int
    end: int
    parent_key: str | None
    ancestors: tuple[tuple[str, int, int, int], ...] = ()
    # ``(key, start, end, n_children)`` of every enclosing node, nearest first.
    children: tuple[int, int] | None = None
    # ``[first, last)`` split ids of this node's children, if it has any.

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
    r"""Exact offsets of a splitter's chunks in ``text`` (empty chunks are skipped).

    A chunk's text alone does not say where it came from when the text repeats
    (``"Error: disk full.\n" * 8``), so every occurrence is a candidate and the
    placement is chosen as a whole: chunks in order (starts never go back),
    leaving the fewest non-whitespace characters of ``text`` uncovered (a
    splitter drops at most whitespace or its separators), then with the least
    overlap between neighbours, then the earliest. For a splitter without
    overlap this is its own ``add_start_index`` answer; with overlap it is
    exact whenever the text fixes it. Chunks that are not in order fall back to
    the first occurrence of each.
    """
    pieces = [chunk for chunk in chunks if chunk]
    for chunk in pieces:
        if chunk not in text:
            msg = (
                "The splitter returned a chunk that is not a substring of its input, "
                f"so its offsets cannot be known: {chunk[:60]!r}. Use a splitter "
                "that keeps the text as it is (no header stripping, no rewriting)."
            )
            raise ValueError(msg)
    if not pieces:
        return []
    placed = _Placement(text, pieces).best()
    starts = placed if placed is not None else [text.find(chunk) for chunk in pieces]
    return [(start, start + len(chunk)) for start, chunk in zip(starts, pieces, strict=True)]


class _Placement:
    """The chunk placement of :func:`locate_chunks`: a shortest path over occurrences."""

    def __init__(self, text: str, pieces: list[str]) -> None:
        self.text, self.pieces = text, pieces
        self.nonws = [0]
        for char in text:
            self.nonws.append(self.nonws[-1] + (not char.isspace()))
        self.solid = [0]
        for chunk in pieces:
            self.solid.append(self.solid[-1] + sum(not char.isspace() for char in chunk))

    def gap(self, a: int, b: int) -> tuple[int, int]:
        """(uncovered non-whitespace, overlap) between a chunk ending at ``a`` and one at ``b``."""
        return (self.nonws[b] - self.nonws[a], 0) if b >= a else (0, a - b)

    def cost(self, starts: Sequence[int]) -> tuple[int, int]:
        """The cost of a placement (``(inf, 0)`` if starts go back)."""
        unc, ov, end, prev = self.nonws[starts[0]], 0, 0, 0
        for start, chunk in zip(starts, self.pieces, strict=True):
            if start < prev:
                return (len(self.text) + 1, 0)
            if end:
                du, do = self.gap(end, start)
                unc, ov = unc + du, ov + do
            prev, end = start, start + len(chunk)
        return (unc + self.nonws[-1] - self.nonws[end], ov)

    def greedy(self) -> list[int]:
        """Each chunk at its first occurrence from the previous end (a cheap upper bound)."""
        starts: list[int] = []
        prev, end = 0, 0
        for chunk in self.pieces:
            start = self.text.find(chunk, end)
            if start < 0 or self.nonws[start] > self.nonws[end]:
                start = self.text.find(chunk, prev + 1 if starts else 0)
            if start < 0:
                start = self.text.find(chunk, prev)
            starts.append(start)
            prev, end = start, start + len(chunk)
        return starts

    def candidates(self, i: int, bound: int) -> list[int]:
        """Occurrences of chunk ``i`` that can be part of a placement costing ``<= bound``."""
        covered_before, covered_after = self.solid[i], self.solid[-1] - self.solid[i]
        lo = bisect.bisect_left(self.nonws, self.nonws[-1] - covered_after - bound)
        hi = bisect.bisect_right(self.nonws, covered_before + bound) - 1
        out, chunk = [], self.pieces[i]
        start = self.text.find(chunk, max(0, lo - 1))
        while 0 <= start <= hi:
            out.append(start)
            start = self.text.find(chunk, start + 1)
        return out

    def best(self) -> list[int] | None:
        """The cheapest placement, or ``None`` if the chunks are not in order."""
        greedy = self.greedy()
        bound = self.cost(greedy)[0]
        if bound > len(self.text):
            bound = len(self.text)
        layers: list[dict[int, tuple[tuple[int, int], int]]] = []
        for i in range(len(self.pieces)):
            layer: dict[int, tuple[tuple[int, int], int]] = {}
            for start in self.candidates(i, bound):
                if not layers:
                    layer[start] = ((self.nonws[start], 0), -1)
                    continue
                size = len(self.pieces[i - 1])
                options = [
                    ((cost[0] + du, cost[1] + do), prev)
                    for prev, (cost, _) in layers[-1].items()
                    if prev <= start
                    for du, do in [self.gap(prev + size, start)]
                ]
                if options:
                    layer[start] = min(options)
            if not layer:
                return None
            layers.append(layer)
        last = len(self.pieces[-1])
        total = self.nonws[-1]
        final = layers[-1]
        end = min(
            final, key=lambda s: (final[s][0][0] + total - self.nonws[s + last], final[s][0][1], s)
        )
        starts = [end]
        for layer in reversed(layers[1:]):
            starts.append(layer[starts[-1]][1])
        return starts[::-1]


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
        raw = text_splitter_spans(splitter, text)
    else:
        raw = locate_chunks(text, splitter(text))
    return tile(raw, len(text))


_MARKS = [(0xF0000, 0xFFFFE), (0x100000, 0x10FFFE)]
"""Unicode's supplementary private-use planes: one mark per character of a text."""
_N_MARKS = sum(hi - lo for lo, hi in _MARKS)


def marked(text: str, keep: set[str]) -> str:
    """``text`` with each character, but whitespace and those in ``keep``, replaced by its mark.

    The mark of the character at ``i`` is the ``i % _N_MARKS``-th code point
    of :data:`_MARKS`, in order. Computed on the text's code points as one
    array: a loop per character took ~0.4 µs each, most of parent mode's
    ingest.
    """
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    kept = [c for c in np.unique(codes).tolist() if chr(c).isspace() or chr(c) in keep]
    position = np.arange(len(codes), dtype=np.int64) % _N_MARKS
    first = _MARKS[0][1] - _MARKS[0][0]
    marks = np.where(position < first, _MARKS[0][0] + position, _MARKS[1][0] + position - first)
    out = np.where(np.isin(codes, kept), codes, marks).astype("<u4")
    return out.tobytes().decode("utf-32-le", "surrogatepass")


def text_splitter_spans(splitter: TextSplitter, text: str) -> list[tuple[int, int]]:
    """The spans a LangChain ``TextSplitter`` cut (empty chunks left out).

    LangChain's character splitters cut by their separators and by length
    alone, so running one on a copy of the text in which every other
    character is replaced by a mark of its own gives chunks that occur once
    each: their places are the splitter's own cuts, also where the text
    repeats and chunks overlap. A splitter that measures by ``len`` or
    :func:`~langchain_s2b.core.budget.estimate_tokens` sees the same lengths in
    the copy, so its cuts there are its cuts in the text and it runs once.
    With any other length function the copy's places are used only when they
    hold exactly the chunks the splitter returns for the real text; otherwise
    (a splitter that reads the characters) :func:`locate_chunks` places them.
    """
    if isinstance(splitter, SpanSplitter):
        return [(a, b) for a, b in splitter.split_spans(text) if b > a]
    keep = _separator_chars(splitter)
    if keep is None:
        return locate_chunks(text, [chunk for chunk in splitter.split_text(text) if chunk])
    copy = marked(text, keep)
    spans: list[tuple[int, int]] = []
    start = 0
    for chunk in splitter.split_text(copy):
        if not chunk:
            continue
        start = copy.find(chunk, start)
        if start < 0:
            break
        spans.append((start, start + len(chunk)))
    if start >= 0 and getattr(splitter, "_length_function", None) in (len, estimate_tokens):
        return spans
    chunks = [chunk for chunk in splitter.split_text(text) if chunk]
    if [text[a:b] for a, b in spans] == chunks:
        return spans
    return locate_chunks(text, chunks)


def _separator_chars(splitter: TextSplitter) -> set[str] | None:
    """The characters a character splitter's plain (non-regex) separators use, else ``None``."""
    if getattr(splitter, "_is_separator_regex", True):
        return None
    separators = getattr(splitter, "_separators", None)
    if separators is None:
        separator = getattr(splitter, "_separator", None)
        separators = None if separator is None else [separator]
    if not isinstance(separators, list) or not all(isinstance(s, str) for s in separators):
        return None
    return set("".join(separators))


_new = tuple.__new__


SplitProgress = Callable[[float], None]
"""Told the share (0 to 1) of a split done so far, as it goes (a command's progress)."""
_SPLIT_PROGRESS: ContextVar[SplitProgress | None] = ContextVar("split_progress", default=None)


@contextmanager
def split_progress(report: SplitProgress | None) -> Iterator[None]:
    """Tell ``report`` how far each split (:func:`build_tree`) in the block has got.

    A context variable, not an argument: the split runs deep inside
    ``add_documents``, and a caller that does not ask pays nothing.
    """
    token = _SPLIT_PROGRESS.set(report)
    try:
        yield
    finally:
        _SPLIT_PROGRESS.reset(token)


@contextmanager
def split_part(low: float, high: float) -> Iterator[SplitProgress | None]:
    """Within the block, a split's shares count as ``low`` to ``high`` of the reported one.

    Yields the reporter of the whole (``None`` when nobody listens), for the
    caller to report the rest of its work.
    """
    outer = _SPLIT_PROGRESS.get()
    if outer is None:
        yield None
        return
    reporter: SplitProgress = outer
    token = _SPLIT_PROGRESS.set(lambda share: reporter(low + (high - low) * share))
    try:
        yield reporter
    finally:
        _SPLIT_PROGRESS.reset(token)


def build_tree(text: str, source_key: str, levels: Sequence[Level]) -> Tree:
    """Split ``text`` into nested spans, one level inside the next.

    Under :func:`split_progress`, each level's share is reported as its parents
    are split (in characters of ``text``).
    """
    report = _SPLIT_PROGRESS.get()
    size = max(len(text), 1) * len(levels)
    names = [level.name for level in levels]
    if len(set(names)) != len(names):
        msg = f"Level names must be distinct; got {names}."
        raise ValueError(msg)
    root = Node(source_key, DOC_LEVEL, 0, 0, len(text), None)
    tree = Tree(levels=[*names, DOC_LEVEL], nodes={DOC_LEVEL: [root]})
    parents = [root]
    for done, level in enumerate(reversed(levels)):
        nodes: list[Node] = []
        for p_index, parent in enumerate(parents):
            if report is not None:
                report((done * len(text) + parent.start) / size)
            first = len(nodes)
            offset, parent_key = parent.start, parent.key
            spans = split_spans(level.splitter, text[offset : parent.end])
            ancestry = ((parent_key, offset, parent.end, len(spans)), *parent.ancestors)
            name = level.name
            for start, end in spans:  # tuple.__new__: a named tuple's own __new__ is Python
                fields = (source_key, name, len(nodes), offset + start, offset + end, parent_key)
                nodes.append(_new(Node, (*fields, ancestry, None)))
            parents[p_index] = parent._replace(children=(first, len(nodes)))
        tree.nodes[parents[0].level] = parents
        tree.nodes[level.name] = nodes
        parents = nodes
    if report is not None:
        report(1.0)
    return tree


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
        small, big = size_in_chars(finer.splitter), size_in_chars(coarser.splitter)
        if small is not None and big is not None and small > big:
            msg = (
                f"The {finer.name!r} splitter's chunks ({_describe_size(finer.splitter)}) are "
                f"larger than the {coarser.name!r} splitter's ({_describe_size(coarser.splitter)});"
                " children must be smaller than parents."
            )
            raise ValueError(msg)
    return list(levels)


def user_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A node's metadata without the fields ingestion added."""
    return {k: v for k, v in metadata.items() if k not in NODE_FIELDS}


def size_in_chars(splitter: Splitter) -> int | None:
    """A ``TextSplitter``'s chunk size in characters, when its unit is known.

    Sizes counted by ``len`` are characters; sizes counted by
    :func:`~langchain_s2b.core.budget.estimate_tokens` are tokens of
    ``CHARS_PER_TOKEN`` characters. Any other length function (a tokenizer)
    has no fixed ratio, so the size can not be compared: ``None``.
    """
    size = getattr(splitter, "_chunk_size", None)
    length = getattr(splitter, "_length_function", None)
    if not isinstance(size, int):
        return None
    if length is len:
        return size
    if length is estimate_tokens:
        return size * CHARS_PER_TOKEN
    return None


def _describe_size(splitter: Splitter) -> str:
    size = getattr(splitter, "_chunk_size", None)
    unit = "characters" if getattr(splitter, "_length_function", None) is len else "tokens"
    return f"chunk_size={size} {unit}"
