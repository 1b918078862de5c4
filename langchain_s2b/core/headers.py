"""Contextual headers: where a leaf stands in its document, and the text that is embedded.

A leaf (a sentence, a ~300-token child) is embedded and indexed for lexical
search together with a short header: its document's title and the path of
section headings above it, e.g. ``"Normans > Norman conquest > Aftermath"``.
The header is the leaf's ``heading`` metadata; a model-written context
(:mod:`~langchain_s2b.core.situate`), when there is one, is its
``leaf_context``. :func:`embedded_text` is the one place that puts them
together with the leaf's text: the embedding and every lexical index read
it, while ``page_content``, offsets and the child index's stored text stay the
source text exactly.

**The section path** comes from the document's own outline (:func:`outline`),
not from the span tree: a section splitter cuts at every heading, whatever
its level, so a leaf's ancestors do not know that "Aftermath" lies under
"Norman conquest". The outline reads Markdown headings (``#`` lines and
``===``/``---`` underlines), reStructuredText titles (a title line under, and
maybe over, a line of one punctuation character; levels in order of first
appearance, as docutils assigns them, except that in a document with ``#``
or HTML headings ``===`` and ``---`` underlines are levels 1 and 2, as in
Markdown) and HTML ``<h1>``-``<h6>``, and skips
fenced code blocks and a YAML front matter. A leaf's path is the stack of
headings in force where its text starts.

**The title** is the document's ``title`` metadata, else its first heading;
a first path entry that repeats the title is left out.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

DEFAULT_CONTEXTUAL_HEADERS = True
"""Whether the command line's stores (sentence leaves) embed contextual headers unless told."""

HEADED_LEAVES = frozenset({"sentence"})
"""Leaf levels a retriever embeds under their header unless told otherwise.

Measured on the dev set with e5 and MiniLM, told the budget (README, "Contextual
headers"): with sentence leaves (window, multilevel and pack trees) headers are at or
above off at every budget with both models; with parent mode's ~300-token chunks they
lose .006-.008 with e5 (a chunk carries its own referents), so those stay off.
"""


def default_headers(leaf_level: str) -> bool:
    """The ``contextual_headers`` a retriever gets when it names none: on for sentence leaves."""
    return leaf_level in HEADED_LEAVES


HEADING = "heading"
"""The leaf metadata field that holds its header (results carry their best match's)."""
LEAF_CONTEXT = "leaf_context"
"""The leaf metadata field that holds its model-written context."""
SEPARATOR = " > "
"""Between the parts of a header."""

HeaderFunction = Callable[[Document, Document], str]
"""``(source document, leaf document) -> header``: a header of the caller's own."""


@dataclass(frozen=True)
class Heading:
    """One heading of a document: where its lines start, its level (1 is the top), its text."""

    start: int
    level: int
    title: str


_FENCE = r"(?P<fence>[ ]{0,3}(?P<fchar>`{3,}|~{3,}))"
_ATX = r"(?P<atx>[ ]{0,3}(?P<hashes>#{1,6}))(?:[ \t]+(?P<atext>[^\n]*)|[ \t]*$)"
_ADORN = r"(?P<adorn>[ ]{0,3}(?P<achar>[!-/:-@\[-`{-~])(?P=achar)*)[ \t]*\r?$"
_LINE = re.compile(rf"^(?:{_FENCE}|{_ATX}|{_ADORN})", re.MULTILINE)
_HTML = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE | re.DOTALL
)


def outline(text: str) -> list[Heading]:
    """Every heading of ``text``, in order (see the module docstring for what counts)."""
    front = _FRONT_MATTER.match(text)
    begin = front.end() if front else 0
    found: list[tuple[int, int | tuple[str, bool], str]] = []
    fence: str | None = None
    for match in _LINE.finditer(text, begin):
        mark = _mark(text, match)
        if fence is not None:  # inside a code block: only its closing fence counts
            if mark and mark[0] == fence[0] and len(mark) >= len(fence) and mark[0] in "`~":
                fence = None
            continue
        atx = match.group("atext")
        if match.group("atx") and atx is not None:
            title = _clean(_CLOSING_HASHES.sub("", atx))
            if title:
                found.append((match.start(), len(match.group("hashes")), title))
            continue
        underlined = None if mark is None else _underlined(text, match.start(), mark, begin)
        if underlined is not None:
            found.append(underlined)
        elif match.group("fence"):
            fence = match.group("fchar")
    found += _html_headings(text, begin)
    found.sort(key=lambda entry: entry[0])
    styles: dict[tuple[str, bool], int] = {}
    if any(isinstance(kind, int) for _, kind, _ in found):  # Markdown: setext levels are fixed
        styles = {("=", False): 1, ("-", False): 2}
    headings = []
    for start, kind, title in found:  # an adornment style: levels in order of first appearance
        level = styles.setdefault(kind, len(styles) + 1) if isinstance(kind, tuple) else kind
        headings.append(Heading(start, level, title))
    return headings


def _mark(text: str, match: re.Match[str]) -> str | None:
    """The line of one repeated punctuation character this match is, else ``None``.

    A line of ``#`` alone (an empty ATX heading) and a fence without an info
    string (``~~~~`` under a reStructuredText title) may be one.
    """
    end = text.find("\n", match.start())
    line = text[match.start() : len(text) if end < 0 else end].strip()
    return line if line and _is_adornment(line) else None


def _line_bounds(text: str, start: int) -> tuple[int, int]:
    """``[start, end)`` of the line before the one starting at ``start`` (``(-1, -1)``: none)."""
    if start <= 0:
        return -1, -1
    end = start - 1  # the newline that ends the previous line
    begin = text.rfind("\n", 0, end) + 1
    return begin, end


def _underlined(
    text: str, at: int, mark: str, begin: int
) -> tuple[int, tuple[str, bool], str] | None:
    """The title over the adornment line at ``at`` (maybe under an equal one), else ``None``."""
    char = mark[0]
    top, bottom = _line_bounds(text, at)
    if top < begin or char == "`":  # a line of backticks is a code fence
        return None
    title = text[top:bottom].strip()
    if not title or _is_adornment(title):
        return None
    over_top, over_bottom = _line_bounds(text, top)
    over = text[over_top:over_bottom].strip() if over_top >= begin else ""
    overlined = bool(over) and set(over) == {char} and len(over) == len(mark)
    strict = char not in "=-" or overlined  # reStructuredText: as long as the title, blank above
    if strict and (len(mark) < len(title) or (over and not overlined)):
        return None
    start = over_top if overlined else top
    return start, (char, overlined), _clean(title)


def _is_adornment(line: str) -> bool:
    return len(set(line)) == 1 and not line[0].isalnum() and not line[0].isspace()


def _html_headings(text: str, begin: int) -> list[tuple[int, int | tuple[str, bool], str]]:
    if "<h" not in text and "<H" not in text:
        return []
    out: list[tuple[int, int | tuple[str, bool], str]] = []
    for match in _HTML.finditer(text, begin):
        title = _clean(html.unescape(_TAG.sub(" ", match.group(2))))
        if title:
            out.append((match.start(), int(match.group(1)), title))
    return out


def _clean(title: str) -> str:
    return _SPACES.sub(" ", title).strip()


class Outline:
    """A document's headings and the section path at any offset of its text."""

    def __init__(self, headings: Sequence[Heading]) -> None:
        self.headings = list(headings)
        self.starts = [h.start for h in self.headings]
        self.paths: list[tuple[str, ...]] = []
        stack: list[Heading] = []
        for heading in self.headings:
            while stack and stack[-1].level >= heading.level:
                stack.pop()
            stack.append(heading)
            self.paths.append(tuple(h.title for h in stack))

    @classmethod
    def of(cls, text: str) -> Outline:
        """The outline of ``text``."""
        return cls(outline(text))

    def path_at(self, offset: int) -> tuple[str, ...]:
        """The headings in force at ``offset``, top first (``()``: before the first heading)."""
        found = bisect.bisect_right(self.starts, offset) - 1
        return self.paths[found] if found >= 0 else ()

    @property
    def first(self) -> str:
        """The first heading's text (``""``: none)."""
        return self.headings[0].title if self.headings else ""


def title_of(metadata: Mapping[str, Any], document_outline: Outline) -> str:
    """A document's title: its ``title`` metadata, else its first heading, else ``""``."""
    given = metadata.get("title")
    if isinstance(given, str) and given.strip():
        return _clean(given)
    return document_outline.first


def _same(a: str, b: str) -> bool:
    """Two titles that differ only in case, spaces and punctuation (``getting-started``)."""
    return [c for c in a.casefold() if c.isalnum()] == [c for c in b.casefold() if c.isalnum()]


def header(title: str, path: Sequence[str]) -> str:
    """``title > section > subsection``; a first section that repeats the title is left out.

    Only the first: a subsection named like the title (``Valley > Valley``) is a place of its own.
    """
    rest = list(path)
    if rest and title and _same(rest[0], title):
        rest.pop(0)
    return SEPARATOR.join(part for part in [title, *rest] if part)


class SectionHeaders:
    """The default headers of one document: its title and the section path at each offset."""

    def __init__(self, text: str, metadata: Mapping[str, Any]) -> None:
        self.text = text
        self.outline = Outline.of(text)
        self.title = title_of(metadata, self.outline)
        self._made: dict[tuple[str, ...], str] = {}

    def at(self, start: int, end: int) -> str:
        """The header of a leaf spanning ``[start, end)`` (where its first non-space is)."""
        text = self.text
        first = start
        while first < end and text[first].isspace():
            first += 1
        path = self.outline.path_at(first)
        found = self._made.get(path)
        if found is None:  # one string per section, shared by its leaves
            found = self._made[path] = header(self.title, path)
        return found


def embedded_text(text: str, metadata: Mapping[str, Any]) -> str:
    """What is embedded and lexically indexed for a leaf: its header, its context, its text.

    ``text`` alone when the leaf has neither (headers off, no context model):
    the vectors of a store made without them are reused as they are.
    """
    heading = metadata.get(HEADING)
    context = metadata.get(LEAF_CONTEXT)
    notes = [note for note in (heading, context) if isinstance(note, str) and note]
    if not notes:
        return text
    return "\n".join(notes) + "\n\n" + text


def describe_headers(headers: bool | HeaderFunction | None) -> str:
    """A stable name of a header setting: ``"off"``, ``"sections"`` or ``"custom"``."""
    if headers is None or headers is False:
        return "off"
    if headers is True:
        return "sections"
    return "custom"


def check_headers(value: Any) -> bool | HeaderFunction | None:
    """``contextual_headers=`` must be a bool, a callable ``(document, leaf) -> str`` or None."""
    if value is None or isinstance(value, bool) or callable(value):
        return value  # type: ignore[no-any-return]
    msg = (
        f"contextual_headers must be True, False, None (by the leaves) or a callable "
        f"(document, leaf) -> str; "
        f"got {type(value).__name__} ({value!r:.60})."
    )
    raise ValueError(msg)
