"""The span tree: a document's text -> nested spans with addresses, one list per level.

Levels are a list, finest first; the document itself is always the root
(level ``"doc"``). Each level is split inside the spans of the level above, so
every node nests in exactly one parent, and the spans of a level tile the text:
a gap a splitter leaves (stripped whitespace) joins the span before it, so no
character is outside a leaf and merged windows equal source slices.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from langchain_text_splitters import TextSplitter

from langchain_s2b.core.budget import CHARS_PER_TOKEN, estimate_tokens
from langchain_s2b.core.keys import check_level_name, node_key

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


def user_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
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
