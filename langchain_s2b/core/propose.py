"""Model-written proxies: propositions, a summary or questions a chat model writes (issue 35).

Three kinds, each asked of one *piece* of a document at a time, the document
shown beside it like the contexts of contextual retrieval
(:mod:`~langchain_s2b.core.situate`: the whole document up to
:data:`~langchain_s2b.core.situate.DOCUMENT_CHARS`, else the window around the
piece):

- ``"propositions"`` (Dense X Retrieval, Chen et al. 2023): the piece is the
  leaves' parent (a paragraph over sentences; each leaf in a tree of one
  level), shown with its leaves numbered ``[1] ... [2] ...``; the model
  decomposes it into clear, minimal, self-contained, decontextualised
  propositions, one a line, each naming the sentences it came from
  (``[1,2] proposition``). A proposition's span runs from the first sentence it
  names to the last; numbers outside the piece are ignored, and a line that
  names none stands for the whole piece.
- ``"questions"``: the same pieces; a few questions the piece answers, one a
  line; each stands for the piece.
- ``"summaries"``: the piece is a section (the level above the leaves'
  parent; the document itself in a shallower tree); one or two sentences that
  stand for it.

**Cache key**: the SHA-256 of what the model is shown: the kind's prompt
version, the model's name, the document's text, the window shown of a long
document and the piece (:func:`cache_key`), under ``s2b-proxy/`` (apart from
the contexts' ``s2b-context/`` in a shared cache). The answer is kept as the
model wrote it (lines tidied, at most :data:`MAX_ANSWER_CHARS`) and parsed
here (:func:`parse`), so a parsing fix needs no new call.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langchain_s2b.core.junk import is_junk
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.situate import DOCUMENT_CHARS, prompt_key, text_digest, window
from langchain_s2b.core.tree import Node, Tree

PROXY_KINDS = {"propositions": "proposition", "summaries": "summary", "questions": "question"}
"""The setting's names (``proxies=``, ``--proxies``) and the :class:`Proxy` kind each writes."""

_DOCUMENT = "<document>\n{document}\n</document>\n"
PROMPTS = {
    "propositions": (
        "{document}"
        "Here is a passage of the document, its sentences numbered:\n"
        "<passage>\n{passage}\n</passage>\n"
        "Decompose the passage into clear and simple propositions, ensuring they are "
        "interpretable out of context.\n"
        "1. Split compound sentences into simple sentences. Maintain the original phrasing "
        "from the input whenever possible.\n"
        "2. For any named entity that is accompanied by additional descriptive information, "
        "separate this information into its own distinct proposition.\n"
        "3. Decontextualize each proposition by adding necessary modifiers to nouns or entire "
        'sentences and replacing pronouns (e.g., "it", "he", "she", "they", "this", "that") '
        "with the full name of the entities they refer to.\n"
        "4. Write one proposition per line, starting with the numbers of the sentences it "
        "comes from in brackets, for example: [1,2] The Eiffel Tower is in Paris.\n"
        "Answer only with the propositions and nothing else."
    ),
    "questions": (
        "{document}"
        "Here is a passage of the document:\n"
        "<passage>\n{passage}\n</passage>\n"
        "Write up to {count} questions that the passage answers, each one self-contained "
        "(name the entities it asks about; no pronouns that need the passage to be "
        "understood). Write one question per line. Answer only with the questions and "
        "nothing else."
    ),
    "summaries": (
        "{document}"
        "Here is {what}:\n"
        "<passage>\n{passage}\n</passage>\n"
        "Summarize it in one or two self-contained sentences (name the entities it is about; "
        "no pronouns that need the document to be understood), for the purposes of improving "
        "search retrieval of it. Answer only with the summary and nothing else."
    ),
}
"""Each kind's prompt; propositions: the Dense X "propositionizer" instructions, in lines."""
PROMPT_VERSIONS = {
    "propositions": "dense-x-propositions-1",
    "questions": "questions-1",
    "summaries": "summary-1",
}
"""Change when a kind's prompt or what it is shown changes (part of every cache key)."""
QUESTIONS = 5
"""Questions asked for per piece."""
MAX_ANSWER_CHARS = 8_000
"""A model's answer is kept to this many characters."""
MAX_PROXY_CHARS = 1_000
"""One proxy's text is kept to this many characters."""
MAX_PER_PIECE = {"propositions": 64, "questions": QUESTIONS, "summaries": 1}
"""The most proxies one piece gives (the first lines of a longer answer)."""

_CITED = re.compile(r"^\[([0-9,\s\-\u2013]*)\]\s*(.*)$")
_MARKER = re.compile(r"^(?:[-*•]\s+|\d{1,3}[.)]\s+|Q\d*[:.]\s*)")


def check_kind(kind: object) -> str:
    """``kind`` if it is a proxy setting; else one line naming what is allowed."""
    if kind not in PROXY_KINDS:
        msg = (
            f"proxies={kind!r} is not a kind of model-written proxy; allowed: {list(PROXY_KINDS)}."
        )
        raise ValueError(msg)
    return str(kind)


def cache_key(
    kind: str, model: str, document_digest: str, piece: str, shown: tuple[int, int] | None = None
) -> str:
    """The cache key of one piece's proxies of ``kind`` (see the module docstring)."""
    return prompt_key("s2b-proxy", PROMPT_VERSIONS[kind], model, document_digest, piece, shown)


@dataclass(frozen=True)
class ProxyPiece:
    """One piece of a document to write proxies for."""

    key: str
    """Its cache key (:func:`cache_key`)."""
    source_id: str
    kind: str
    """The setting: ``"propositions"``, ``"summaries"`` or ``"questions"``."""
    document: str
    """The whole source text (shared, not copied)."""
    start: int
    end: int
    sentences: tuple[tuple[int, int], ...]
    """The spans of the piece's leaves, in order (numbered from 1 in a proposition prompt)."""

    def prompt(self) -> str:
        """The prompt that asks for this piece's proxies.

        A piece longer than :data:`~langchain_s2b.core.situate.DOCUMENT_CHARS`
        (a long section, a document without sections) is shown as its first
        ``DOCUMENT_CHARS`` characters (its first sentences, numbered), alone.
        """
        text = self.document
        whole = (self.start, self.end) == (0, len(text))
        shown = ""
        if not whole and self.end - self.start <= DOCUMENT_CHARS:
            lo, hi = window(len(text), self.start, self.end)
            shown = _DOCUMENT.format(document=text[lo:hi])
        if self.kind == "propositions":
            passage = "\n".join(
                f"[{i}] {' '.join(text[s:e].split())}"
                for i, (s, e) in enumerate(self.numbered(), 1)
            )
        else:
            passage = text[self.start : min(self.end, self.start + DOCUMENT_CHARS)].strip()
        what = "the document" if whole else "a section of the document"
        return PROMPTS[self.kind].format(
            document=shown, passage=passage, count=QUESTIONS, what=what
        )

    def numbered(self) -> tuple[tuple[int, int], ...]:
        """The sentences a proposition prompt numbers (the first ``DOCUMENT_CHARS`` characters).

        Those that start in the piece's first ``DOCUMENT_CHARS`` characters; the first, always.
        """
        limit = self.start + DOCUMENT_CHARS
        return self.sentences[:1] + tuple(s for s in self.sentences[1:] if s[0] < limit)


def unit_level(tree: Tree, kind: str) -> int:
    """The index in ``tree.levels`` of the level whose nodes are ``kind``'s pieces."""
    paragraphs = 1 if len(tree.levels) > 2 else 0
    return paragraphs + 1 if kind == "summaries" else paragraphs


def pieces(source_id: str, text: str, tree: Tree, kind: str, model: str) -> list[ProxyPiece]:
    """The pieces of one source that get proxies of ``kind``, in order.

    A piece whose leaves are all left unembedded (no letter) gets none.
    """
    leaves = tree.leaves
    level = unit_level(tree, kind)
    units: Sequence[Node] = tree.nodes[tree.levels[level]]
    digest = text_digest(text)
    long = len(text) > DOCUMENT_CHARS
    found: list[ProxyPiece] = []
    for unit in units:
        spans = [(leaf.start, leaf.end) for leaf in _leaves_of(leaves, unit, level)]
        if all(is_junk(text[s:e]) for s, e in spans):
            continue
        piece = text[unit.start : unit.end]
        shown = window(len(text), unit.start, unit.end) if long else None
        key = cache_key(kind, model, digest, piece, shown)
        found.append(ProxyPiece(key, source_id, kind, text, unit.start, unit.end, tuple(spans)))
    return found


def _leaves_of(leaves: Sequence[Node], unit: Node, level: int) -> Sequence[Node]:
    """The leaves under ``unit``, a node of the level at ``level``."""
    if level == 0:
        return [unit]
    if level == 1 and unit.children is not None:
        return leaves[unit.children[0] : unit.children[1]]
    lo = bisect.bisect_left(leaves, unit.start, key=_start)
    hi = bisect.bisect_left(leaves, unit.end, key=_start)
    return leaves[lo:hi]


def _start(node: Node) -> int:
    return node.start


def tidy(answer: str) -> str:
    """A model's answer as kept in the cache: its non-empty lines, each on one line, capped."""
    lines = (" ".join(line.split()) for line in answer.splitlines())
    return "\n".join(line for line in lines if line)[:MAX_ANSWER_CHARS]


def parse(piece: ProxyPiece, answer: str) -> list[Proxy]:
    """The proxies one answer gives its piece (never raises on what a model wrote)."""
    kind = PROXY_KINDS[piece.kind]
    if piece.kind == "summaries":
        text = " ".join(answer.split())[:MAX_PROXY_CHARS]
        return [Proxy(text, piece.start, piece.end, kind)] if text else []
    out: list[Proxy] = []
    seen: set[str] = set()
    for raw in answer.splitlines():
        line = " ".join(raw.split())
        start, end = piece.start, piece.end
        if piece.kind == "propositions":
            line, start, end = _cited(piece, line)
        else:
            line = _MARKER.sub("", line, count=1).strip()
        line = line[:MAX_PROXY_CHARS]
        if not line or line in seen:
            continue
        seen.add(line)
        out.append(Proxy(line, start, end, kind))
        if len(out) == MAX_PER_PIECE[piece.kind]:
            break
    return out


def _cited(piece: ProxyPiece, line: str) -> tuple[str, int, int]:
    """A proposition line's text and span: the sentences it names, else the whole piece."""
    line = _MARKER.sub("", line, count=1).strip()
    found = _CITED.match(line)
    if found is None:
        return line, piece.start, piece.end
    numbers = _numbers(found.group(1), len(piece.numbered()))
    text = found.group(2).strip()
    if not numbers:
        return text, piece.start, piece.end
    return text, piece.sentences[min(numbers) - 1][0], piece.sentences[max(numbers) - 1][1]


def _numbers(cited: str, count: int) -> list[int]:
    """The sentence numbers a citation names (``1,2``, ``1-3``), those from 1 to ``count``."""
    out = []
    for part in cited.split(","):
        ends = [p.strip() for p in re.split(r"[-\u2013]", part)]
        if not all(p.isascii() and p.isdigit() for p in ends) or len(ends) > 2:
            continue
        numbers = [int(p) for p in ends]
        out += [n for n in numbers if 1 <= n <= count]
    return out


def document_proxies(found: Sequence[ProxyPiece], by_key: Mapping[str, str]) -> list[Proxy]:
    """One document's proxies, piece by piece, from the answers by cache key."""
    return [proxy for piece in found for proxy in parse(piece, by_key[piece.key])]
