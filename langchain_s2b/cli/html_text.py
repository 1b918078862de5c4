"""An HTML page as a reader sees it: its text in paragraphs, headings as Markdown, chrome dropped.

:func:`page_text` turns a page's bytes into the text ``s2b index`` indexes, and its title:

- **Blocks are paragraphs, inline elements flow.** Every block element (``p``,
  ``div``, ``dt``, ``dd``, ``blockquote``, ...) starts a paragraph, separated by a
  blank line; the text of inline elements (``a``, ``code``, ``em``, ``span``, ...)
  stays in its sentence, and whitespace collapses as a browser shows it.
- **Headings stay headings**: ``<h1>``-``<h6>`` become a Markdown heading line
  (``## Title``) of their level, a paragraph of their own, so the section
  splitter (``core/splitters.py``) sees the page's sections.
- **Lists, tables, pre, br.** A list is one paragraph, an item a line (``- ``,
  or ``1. `` in an ordered list; nested lists indented). A data table is one
  paragraph, a row a line, its cells joined by `` | ``; a layout table (one
  column, a nested table or a heading in it, ``role="presentation"``) is read
  as the blocks it holds. ``<pre>`` keeps its line breaks and spaces; ``<br>``
  breaks the line.
- **What a reader does not read is dropped**: ``<head>``, scripts, styles,
  templates, forms' controls, embedded objects, hidden elements (``hidden``,
  ``aria-hidden="true"``, ``display: none``), permalink anchors (``¶``, and in
  a heading any link to a place on the page whose text is only a mark such as
  ``#``, ``¶``, ``§`` or 🔗, as Node.js's API pages have); the
  page's chrome as HTML-AAM maps it to landmarks (``<nav>``; ``<header>``,
  ``<footer>`` and ``<aside>`` of the page, not of an article or section; any
  ``role`` navigation, banner, contentinfo, complementary or search); and
  **link lists**: a paragraph, a whole list or a whole table whose text is mostly
  link text (a navigation bar such as Texinfo's "Next: ... Previous: ... Up:
  ...", a table of contents, an index). Links to ``mailto:`` or ``tel:`` are
  text, not navigation. A heading left with nothing under it (before the next
  heading of its rank or higher) goes too.

The bytes are decoded as a browser would (:mod:`~langchain_s2b.cli.html_charset`:
a byte-order mark, else the charset the page declares in its first 1024 bytes,
what it can not decode as U+FFFD; else UTF-8, else windows-1252) and streamed
through libxml2's HTML parser (lxml) into a list of blocks: no tree of the page
is built and nothing recurses, so a deeply nested or very large page costs
memory in proportion to its text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from langchain_s2b.cli.html_charset import decode

LINK_SHARE = 0.5
"""A paragraph, list or table is a link list (dropped) when this share of its words are links'."""

_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SKIPPED = frozenset(
    {
        "head", "script", "style", "template", "noscript", "iframe", "object", "embed",
        "applet", "svg", "canvas", "audio", "video", "map", "select", "button", "input",
        "textarea", "datalist", "nav", "frameset", "title",
    }
)  # fmt: skip
_LISTS = frozenset({"ul", "ol", "menu", "dir"})
_TABLE_PARTS = frozenset({"tr", "td", "th", "thead", "tbody", "tfoot", "caption", "colgroup"})
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "center", "dd", "details",
        "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
        "header", "hgroup", "hr", "html", "legend", "li", "listing", "main", "noframes",
        "p", "plaintext", "pre", "search", "section", "summary", "table", "xmp",
        *_HEADINGS, *_LISTS, *_TABLE_PARTS,
    }
)  # fmt: skip
_FOREIGN = frozenset({"svg", "math"})
"""Foreign content: its ``<title>`` is an image's or a formula's, not the page's."""
_CODE = frozenset({"code", "tt", "kbd", "samp", "var"})
_PRE = frozenset({"pre", "listing", "xmp", "plaintext"})
_LANDMARK_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
_MAX_INDENT = 8
"""Nested lists deeper than this are indented no further."""
_PERMALINKS = frozenset({"headerlink", "copiable-anchor", "copiable-link", "anchorjs-link"})
_MARK_CHARACTERS = "#¶§🔗\ufe0e\ufe0f\u200b\u2060\ufeff\xa0" + " \t\n\r\f"
"""A heading's permalink shows these alone (Node.js ``#``, Sphinx ``¶``, rustdoc ``§``, 🔗)."""
_SCOPES_PAGE_CHROME = frozenset({"article", "aside", "main", "nav", "section"})
_SCOPES_ASIDE = frozenset({"article", "aside", "nav", "section"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_SPACE = " \t\n\r\f"  # HTML's whitespace (a no-break space is text)
_TO_SPACE = str.maketrans("\t\n\r\f", "    ")
_FEED = 1 << 20
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019\u00bb)\]]*\Z")  # closing quotes, brackets
_BLANK_LINES = re.compile(r"\n{3,}")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t\f]*\n)+")


def page_text(data: bytes) -> tuple[str, str | None]:
    """The text a reader reads on an HTML page, and its title, else its first heading.

    The title is HTML's first ``<title>``, not one inside ``<svg>`` or ``<math>``
    (an icon's or a formula's), as a browser's ``document.title`` reads it.

    Raises:
        ImportError: lxml is not installed.
        ValueError: libxml2 could not read the page, or it declares an encoding browsers
            refuse to decode.
    """
    try:
        from lxml import etree
    except ImportError:
        msg = 'reading HTML needs lxml: pip install "langchain-s2b[cli]"'
        raise ImportError(msg) from None
    text = decode(data)
    if not text or text.isspace():
        return "", None
    walk = _Walk()
    parser = etree.HTMLParser(target=walk, encoding="utf-8", huge_tree=True, no_network=True)
    try:
        for at in range(0, len(text), _FEED):  # a megabyte at a time: one copy of the page
            parser.feed(text[at : at + _FEED].encode("utf-8"))
        parser.close()
    except etree.LxmlError as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(msg) from None
    return walk.result()


@dataclass(slots=True)
class _Block:
    """A paragraph, heading, preformatted block, list item or table cell, as it is read."""

    kind: str
    """``"text"``, ``"heading"`` or ``"pre"``."""
    level: int = 0
    """A heading's level (1-6)."""
    prefix: str = ""
    """A list item's marker, with its indent."""
    parts: list[str] = field(default_factory=list)
    space: bool = False
    """Whitespace seen after the last part (written only if more text follows)."""
    chars: int = 0
    """Characters of text (not whitespace)."""
    words: int = 0
    link_words: int = 0
    """Words (runs of letters and digits), and of those the words of links."""
    group: int | None = None
    """The outermost list or data table the block is a line of."""
    table: int | None = None
    row: int | None = None
    cell: int | None = None

    def render(self) -> str:
        body = "".join(self.parts)
        if self.kind == "pre":
            return self.prefix + _LEADING_BLANK_LINES.sub("", body).rstrip()
        if self.kind == "heading":
            return "#" * self.level + " " + " ".join(body.split("\n")).strip(" ")
        lines = "\n".join(line.strip(" ") for line in body.split("\n"))
        return self.prefix + _BLANK_LINES.sub("\n\n", lines.strip("\n"))


@dataclass(slots=True)
class _Mark:
    """A heading's block as it was where a link to a place on the page started."""

    block: _Block | None
    parts: int = 0
    chars: int = 0
    words: int = 0
    link_words: int = 0
    space: bool = False


@dataclass(slots=True)
class _Open:
    """An element the walk is inside."""

    tag: str
    position: int
    """Its index among the open elements."""
    block: bool = False
    """It is read as a block (not inside a heading or a ``<pre>``)."""
    start: int = 0
    """How many blocks were written when it opened: its own are those after."""
    ident: int = 0
    counter: int = 0
    """A list's last item number; a table's rows; a row's cells."""
    depth: int = 0
    """A list's nesting depth."""
    layout: bool = False
    """A table read as the blocks it holds."""
    wide: bool = False
    """A table with a row of two cells or more."""
    marker: str | None = None
    """A list item's marker, until its first block takes it."""
    indent: int = 0
    """A list item's indent for its later paragraphs (its marker's width)."""
    link: bool = False
    """An ``<a>`` that navigates."""
    code: bool = False
    mark: _Mark | None = None
    """A link to a place on the page, in a heading: where its text starts, to drop a mark."""


class _Walk:
    """lxml's parser target: start, end and data events into blocks (see the module's docstring).

    Every event costs the same however deep the page nests: the open lists,
    items, tables, rows, cells and headings are stacks of their own.
    """

    def __init__(self) -> None:
        self.blocks: list[_Block] = []
        self.current: _Block | None = None
        self.open: list[_Open] = []
        self.skip_at: int | None = None
        """The position of the dropped element the walk is inside."""
        self.title: list[str] | None = None
        """The text of the page's ``<title>``: HTML's first, not an SVG's or MathML's."""
        self.in_title = False
        self.foreign = 0
        """How many ``<svg>`` and ``<math>`` the walk is inside."""
        self.ids = 0
        self.links = 0
        self.code = 0
        self.pre = 0
        self.fresh_pre = False
        self.headings: list[int] = []
        self.lists: list[_Open] = []
        self.items: list[_Open] = []
        self.tables: list[_Open] = []
        self.rows: list[_Open] = []
        self.cells: list[_Open] = []
        self.scopes = dict.fromkeys(_SCOPES_PAGE_CHROME, 0)

    # lxml's target interface

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if tag in _FOREIGN:
            self.foreign += 1
        elif tag == "title" and self.title is None and not self.foreign:
            self.title, self.in_title = [], True
        frame = _Open(tag, len(self.open))
        if self.skip_at is None and self._dropped(tag, attrib):
            self.skip_at = frame.position
        self.open.append(frame)
        if self.skip_at is not None:
            return
        if tag in self.scopes:
            self.scopes[tag] += 1
        if tag == "br":
            self._line_break()
        elif tag in _BLOCKS and not self._inline_only():
            self._break()
            frame.block, frame.start = True, len(self.blocks)
            self._open_block(frame, attrib)
        elif tag == "a" and _navigates(attrib):
            frame.link = True
            self.links += 1
            if self.headings and attrib.get("href", "").strip(_SPACE).startswith("#"):
                frame.mark = self._mark_start()
        elif tag in _CODE:
            frame.code = True
            self.code += 1

    def end(self, tag: str) -> None:
        if tag == "title" and not self.foreign:
            self.in_title = False
        if self.open and self.open[-1].tag != tag:
            index = next((f.position for f in reversed(self.open) if f.tag == tag), None)
            if index is None:
                return  # an end without a start
            while len(self.open) > index + 1:
                self._pop()
        if self.open:
            self._pop()

    def data(self, text: str) -> None:
        if self.in_title and self.title is not None:
            self.title.append(text)
        if self.skip_at is not None:
            return
        if self.pre:
            self._raw(text)
        else:
            self._flow(text)

    def close(self) -> None:
        while self.open:
            self._pop()
        self._break()

    def result(self) -> tuple[str, str | None]:
        """The page's text and its title, once the parser is closed."""
        title = _collapsed("".join(self.title or ())).strip(" ")
        if not title:
            title = next((_heading_text(b) for b in self.blocks if b.kind == "heading"), "")
        return _joined(_with_sections(_without_link_lists(self.blocks))), title or None

    # what is dropped

    def _dropped(self, tag: str, attrib: dict[str, str]) -> bool:
        if tag in _SKIPPED or (tag == "dialog" and "open" not in attrib):
            return True
        if tag in ("header", "footer"):  # the page's banner and contentinfo (HTML-AAM)
            return not any(self.scopes.values())
        if tag == "aside":  # complementary unless inside an article, aside, nav or section
            return not any(self.scopes[t] for t in _SCOPES_ASIDE)
        return bool(attrib) and self._hidden(tag, dict(attrib))

    def _hidden(self, tag: str, attrib: dict[str, str]) -> bool:
        if "hidden" in attrib or attrib.get("aria-hidden", "").strip().lower() == "true":
            return True
        if _HIDDEN_STYLE.search(attrib.get("style", "")):
            return True
        if set(attrib.get("role", "").lower().split()) & _LANDMARK_ROLES:
            return True
        return tag == "a" and bool(set(attrib.get("class", "").split()) & _PERMALINKS)

    def _pop(self) -> None:
        frame = self.open.pop()
        if frame.tag in _FOREIGN:
            self.foreign -= 1
        if self.skip_at is not None:
            if frame.position == self.skip_at:
                self.skip_at = None
            return
        if frame.tag in self.scopes:
            self.scopes[frame.tag] -= 1
        if frame.link:
            self.links -= 1
        if frame.mark is not None:
            self._drop_mark(frame.mark)
        if frame.code:
            self.code -= 1
        if frame.block:
            self._break()
            self._close_block(frame)

    def _mark_start(self) -> _Mark:
        block = self.current
        if block is None:
            return _Mark(None)
        return _Mark(
            block, len(block.parts), block.chars, block.words, block.link_words, block.space
        )

    def _drop_mark(self, mark: _Mark) -> None:
        """A heading's self-link whose text is only a mark (``#``, ``¶``, ``§``): not its text."""
        block = self.current
        if block is None or (mark.block is not None and block is not mark.block):
            return
        text = "".join(block.parts[mark.parts :])
        if not text or text.strip(_MARK_CHARACTERS):
            return
        del block.parts[mark.parts :]
        block.chars, block.words, block.link_words = mark.chars, mark.words, mark.link_words
        block.space = mark.space or block.space or " " in text

    # blocks

    def _inline_only(self) -> bool:
        """Inside a heading or a ``<pre>``, block elements do not break the text."""
        return bool(self.headings) or self.pre > 0

    def _open_block(self, frame: _Open, attrib: dict[str, str]) -> None:
        tag = frame.tag
        if tag in _HEADINGS or tag == "table":
            table = self._cell_table()
            if table is not None:
                table.layout = True  # a heading or a table in a cell: the table is a layout
        if tag in _HEADINGS:
            self.headings.append(_HEADINGS[tag])
        elif tag in _PRE:
            self.pre += 1
            self.fresh_pre = True
        elif tag in _LISTS:
            frame.depth = len(self.lists)
            frame.counter = _int(attrib.get("start"), 1) - 1 if tag == "ol" else 0
            self.lists.append(frame)
        elif tag == "li":
            frame.marker = self._marker()
            frame.indent = len(frame.marker)
            self.items.append(frame)
        elif tag == "table":
            frame.ident = self._new_id()
            frame.layout = attrib.get("role", "").strip().lower() in ("presentation", "none")
            self.tables.append(frame)
        elif tag == "tr":
            self._open_row(frame)
        elif tag in ("td", "th"):
            self._open_cell(frame)

    def _close_block(self, frame: _Open) -> None:
        tag = frame.tag
        if tag in _HEADINGS:
            self.headings.pop()
        elif tag in _PRE:
            self.pre -= 1
        elif tag in _LISTS:
            self.lists.pop()
            if not self.lists:
                self._group(frame.start)
        elif tag == "li":
            self.items.pop()
        elif tag == "table":
            self.tables.pop()
            if frame.wide and not frame.layout:
                self._rows(frame)
                self._group(frame.start)
        elif tag == "tr":
            self.rows.pop()
        elif tag in ("td", "th"):
            self.cells.pop()
            table = self._cell_table(frame.position)
            if table is not None and len(self.blocks) - frame.start > 1:
                table.layout = True  # a cell of paragraphs: the table is a layout

    def _marker(self) -> str:
        if not self.lists:
            return "- "
        inner = self.lists[-1]
        inner.counter += 1
        bullet = f"{inner.counter}. " if inner.tag == "ol" else "- "
        return "  " * min(inner.depth, _MAX_INDENT) + bullet

    def _open_row(self, frame: _Open) -> None:
        table = self.tables[-1] if self.tables else None
        if table is not None:
            table.counter += 1
            frame.ident = table.counter
        self.rows.append(frame)

    def _open_cell(self, frame: _Open) -> None:
        frame.ident = self._new_id()
        row = self._row()
        if row is not None:
            row.counter += 1
            if row.counter > 1:
                self.tables[-1].wide = True
        self.cells.append(frame)

    def _row(self) -> _Open | None:
        if self.rows and self.tables and self.rows[-1].position > self.tables[-1].position:
            return self.rows[-1]
        return None

    def _cell(self) -> _Open | None:
        if self.cells and self.tables and self.cells[-1].position > self.tables[-1].position:
            return self.cells[-1]
        return None

    def _cell_table(self, below: int | None = None) -> _Open | None:
        """The innermost table when the walk is in one of its cells (or was, at ``below``)."""
        if not self.tables:
            return None
        cell = self._cell()
        if below is not None:
            return self.tables[-1] if below > self.tables[-1].position else None
        return self.tables[-1] if cell is not None else None

    def _block(self) -> _Block:
        if self.current is not None:
            return self.current
        if self.headings:
            block = _Block("heading", level=self.headings[-1])
        else:
            block = _Block("pre" if self.pre else "text")
            item = self.items[-1] if self.items else None
            if item is not None and item.marker is not None:
                block.prefix, item.marker = item.marker, None
            elif item is not None and block.kind == "text":
                block.prefix = " " * item.indent
        if self.tables:
            row, cell = self._row(), self._cell()
            block.table = self.tables[-1].ident
            block.row = row.ident if row is not None else None
            block.cell = cell.ident if cell is not None else None
        self.current = block
        return block

    def _break(self) -> None:
        block, self.current = self.current, None
        if block is not None and block.chars:
            self.blocks.append(block)

    def _flow(self, text: str) -> None:
        words = _collapsed(text)
        core = words.strip(" ")
        if not core:
            if words and self.current is not None:
                self.current.space = True
            return
        block = self._block()
        if block.parts and block.parts[-1] != "\n" and (block.space or words[0] == " "):
            block.parts.append(" ")
        block.parts.append(core)
        block.space = words[-1] == " "
        self._count(block, len(core) - core.count(" "), _words(core))

    def _raw(self, text: str) -> None:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self.fresh_pre:
            self.fresh_pre = False
            text = text.removeprefix("\n")  # the newline after <pre> is not the page's
        if not text:
            return
        block = self._block()
        block.parts.append(text)
        self._count(block, len(text) - sum(text.count(c) for c in _SPACE), _words(text))

    def _count(self, block: _Block, chars: int, words: int) -> None:
        block.chars += chars
        block.words += words
        if self.links and not self.code:  # a link to code names the code: text, not a label
            block.link_words += words

    def _line_break(self) -> None:
        if self.current is not None:
            self.current.parts.append("\n")
            self.current.space = False

    # tables and lists

    def _rows(self, table: _Open) -> None:
        """A data table's blocks become its rows: one line each, cells joined by `` | ``."""
        rows: dict[int | None, dict[int | None, list[_Block]]] = {}
        for block in self.blocks[table.start :]:
            rows.setdefault(block.row, {}).setdefault(block.cell, []).append(block)
        lines = []
        for cells in rows.values():
            texts = [" ".join(_one_line(b) for b in blocks) for blocks in cells.values()]
            line = _Block("text", parts=[" | ".join(texts)])
            line.chars = sum(b.chars for blocks in cells.values() for b in blocks)
            line.words = sum(b.words for blocks in cells.values() for b in blocks)
            line.link_words = sum(b.link_words for blocks in cells.values() for b in blocks)
            lines.append(line)
        self.blocks[table.start :] = lines

    def _group(self, start: int) -> None:
        """The blocks since ``start`` are the lines of one paragraph."""
        ident = self._new_id()
        for block in self.blocks[start:]:
            block.group = ident

    def _new_id(self) -> int:
        self.ids += 1
        return self.ids


def _collapsed(text: str) -> str:
    """Runs of HTML whitespace as one space (no list of pieces: a page may be one long text)."""
    text = text.translate(_TO_SPACE)
    while "  " in text:
        text = text.replace("  ", " ")
    return text


def _words(text: str) -> int:
    return sum(1 for _ in _WORD.finditer(text))


def _navigates(attrib: dict[str, str]) -> bool:
    href = attrib.get("href")
    return href is not None and not href.strip().lower().startswith(("mailto:", "tel:"))


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _one_line(block: _Block) -> str:
    return " ".join(block.render().split("\n")).strip(" ")


def _heading_text(block: _Block) -> str:
    return block.render().lstrip("#").strip()


def _without_link_lists(blocks: list[_Block]) -> list[_Block]:
    """The blocks without link lists: a paragraph, or a list or table whole, mostly links."""
    kept: list[_Block] = []
    index = 0
    while index < len(blocks):
        end = index + 1
        group = blocks[index].group
        if group is not None:
            while end < len(blocks) and blocks[end].group == group:
                end += 1
        unit = blocks[index:end]
        words = sum(b.words for b in unit if b.kind != "heading")
        links = sum(b.link_words for b in unit if b.kind != "heading")
        if not words or links < LINK_SHARE * words or any(_sentence(b) for b in unit):
            kept.extend(unit)
        else:
            kept.extend(b for b in unit if b.kind == "heading")
        index = end
    return kept


def _sentence(block: _Block) -> bool:
    """Its text ends as a sentence does (a navigation bar's or a link list's labels do not)."""
    return block.kind != "heading" and _SENTENCE_END.search(block.render()) is not None


def _with_sections(blocks: list[_Block]) -> list[_Block]:
    """Without the headings that have nothing under them before the next of their rank."""
    kept: list[_Block] = []
    for block in reversed(blocks):
        if block.kind == "heading":
            after = kept[-1] if kept else None
            if after is None or (after.kind == "heading" and after.level <= block.level):
                continue
        kept.append(block)
    kept.reverse()
    return kept


def _joined(blocks: list[_Block]) -> str:
    out: list[str] = []
    previous: _Block | None = None
    for block in blocks:
        text = block.render()
        if not text.strip():
            continue
        if previous is not None:
            same = block.group is not None and block.group == previous.group
            lines = same and "heading" not in (block.kind, previous.kind)
            out.append("\n" if lines else "\n\n")
        out.append(text)
        previous = block
    return "".join(out)
