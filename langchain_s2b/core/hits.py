"""Hits: matched leaves, the groups they form, and the metadata of the results they become."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, count, islice
from operator import attrgetter, eq, ge
from typing import Any, NamedTuple, TypeVar

from langchain_core.documents import Document

from langchain_s2b.core.headers import HEADING
from langchain_s2b.core.keys import PROXY_LEVEL, base_source_key, node_key
from langchain_s2b.core.tree import user_metadata

LEAF_FIELDS = ("source_id", "source_key", "level", "split_id", "start", "end")
PROXY_KIND = "proxy_kind"
"""A proxy's metadata: its kind (:data:`~langchain_s2b.core.proxies.KINDS`)."""
COVERS = "covers"
"""A proxy's metadata: ``[leaf level, first, last]``, the leaves its span meets."""


class Hit(NamedTuple):
    """One matched leaf: where it sits and how well it matched.

    A named tuple, not a dataclass: a query builds one per FAISS row, and a
    tuple is built ~4x faster than a frozen dataclass while staying immutable.
    """

    key: str
    source_key: str
    source_id: str
    level: str
    split_id: int
    start: int
    end: int
    score: float
    text: str
    parent_key: str | None = None
    ancestors: tuple[tuple[str, int, int, int], ...] = ()
    # ``(key, start, end, n_children)`` of each enclosing node, nearest first.
    n_splits: int | None = None
    heading: str = ""
    """The leaf's contextual header (``""``: none)."""
    proxy: tuple[str, str, str] | None = None
    """``(key, kind, text)`` of the proxy this hit came through (``None``: the leaf's own)."""
    covers: tuple[str, int, int] | None = None
    """A proxy's own hit: ``(leaf level, first, last)`` split ids of the leaves it stands for
    (:mod:`~langchain_s2b.core.proxy_spans`); ``None`` for a leaf."""

    def match(self) -> dict[str, Any]:
        """The citation record of this hit (the entries of a result's ``matches``)."""
        out: dict[str, Any] = {
            "key": self.key,
            "split_id": self.split_id,
            "score": self.score,
            "start": self.start,
            "end": self.end,
        }
        if self.proxy is not None:
            key, kind, text = self.proxy
            out["proxy"] = {"key": key, "kind": kind, "text": text}
        return out


class Scored(NamedTuple):
    """A child a search found but nobody has read yet: its key and its score.

    A query searches ~100 children deep to read its own scale from their
    scores, and BM25 adds up to 100 more; a mode places a few of them. The
    child index answers with these, and a hit's text, span and ancestors are
    read (:class:`~langchain_s2b.core.requests.ReadHits`) only for the
    candidates a mode places (:func:`~langchain_s2b.core.retrieval.retrieve_vector`).
    Its place in its source comes from its key, a node key
    (``<source-key>/<level>/<split_id>``): a child whose key is not one is
    always read at once, as a :class:`Hit`.
    """

    key: str
    score: float
    source_key: str
    """The source key its node key names."""
    split_id: int
    """The split id its node key names."""
    proxy: tuple[str, str, str] | None = None
    """``(key, kind, text)`` of the proxy it was found through (``None``: its own vector)."""

    @classmethod
    def of(cls, key: str, score: float, proxy: tuple[str, str, str] | None = None) -> Scored:
        """The unread hit of node key ``key`` (its source key and split id read from it)."""
        source_key, _, rest = key.partition("/")
        return cls(key, score, source_key, int(rest.rpartition("/")[2]), proxy)


Candidate = Hit | Scored
"""A search's answer for one child: read (a :class:`Hit`) or not yet (:class:`Scored`)."""


def unread(candidates: Sequence[Candidate]) -> list[str]:
    """The keys of the candidates not read yet, in order."""
    return [c.key for c in candidates if isinstance(c, Scored)]


def with_read(
    candidates: Sequence[Candidate], asked: Collection[str], read: Mapping[str, Hit]
) -> list[Candidate]:
    """The candidates with each one read in ``read`` as its hit (at its own score).

    An unread candidate ``asked`` for and not read (its child is gone since
    the search) is left out; one not asked for stays as it is.
    """
    out: list[Candidate] = []
    for c in candidates:
        if not isinstance(c, Scored):
            out.append(c)
        elif c.key in read:
            hit = with_score(read[c.key], c.score)
            out.append(hit if c.proxy is None else hit._replace(proxy=c.proxy))
        elif c.key not in asked:
            out.append(c)
    return out


def all_read(candidates: Sequence[Candidate]) -> list[Hit]:
    """The candidates as hits; every one must have been read."""
    hits = [c for c in candidates if isinstance(c, Hit)]
    if len(hits) != len(candidates):
        msg = f"{len(candidates) - len(hits)} of {len(candidates)} candidates were never read."
        raise RuntimeError(msg)
    return hits


SCORE = Hit._fields.index("score")
"""Where a hit's score sits among its fields."""


def with_score(hit: Hit, score: float) -> Hit:
    """``hit._replace(score=score)``, without its per-call Python (fusion rescores ~100 hits)."""
    return tuple.__new__(Hit, (*hit[:SCORE], score, *hit[SCORE + 1 :]))


def hit_from_child(doc: Document, score: float) -> Hit:
    """Read a child search result's metadata; raise if it lacks our fields."""
    return hit_from_metadata(doc.metadata, doc.page_content, score, doc.id)


def hit_from_metadata(
    meta: Mapping[str, Any], text: str, score: float, name: str | None = None
) -> Hit:
    """Build a hit from leaf metadata; raise if it lacks our fields or they are malformed."""
    try:
        source_key, level, split_id = meta["source_key"], meta["level"], int(meta["split_id"])
        source_id, start, end = meta["source_id"], int(meta["start"]), int(meta["end"])
        ancestors = tuple(
            (str(a[0]), int(a[1]), int(a[2]), int(a[3]) if len(a) > 3 else 0)
            for a in meta.get("ancestors", ())
        )
        splits, parent = meta.get("source_splits"), meta.get("parent_id")
        splits = None if splits is None else int(splits)
        heading = meta.get(HEADING, "")
        proxy, covers = None, None
        if level == PROXY_LEVEL:  # a proxy's own row: what it is and the leaves it covers
            kind, covers = read_proxy(meta)
            proxy = (node_key(source_key, level, split_id), kind, text)
        if not all(isinstance(v, str) for v in (source_key, level, source_id, heading)) or not (
            parent is None or isinstance(parent, str)
        ):
            raise TypeError
    except (KeyError, TypeError, ValueError, IndexError):  # a crafted store's values, too
        missing = [field for field in LEAF_FIELDS if field not in meta]
        problem = f"lacks the metadata {missing}" if missing else "has malformed metadata"
        msg = (
            f"Child {name or text[:40]!r} from the vector store {problem}; was the index built "
            "by SmallToBigRetriever.add_documents?"
        )
        raise ValueError(msg) from None
    return Hit(
        node_key(source_key, level, split_id),
        source_key,
        source_id,
        level,
        split_id,
        start,
        end,
        float(score),
        text,
        parent,
        ancestors,
        splits,
        heading,
        proxy,
        covers,
    )


def read_proxy(meta: Mapping[str, Any]) -> tuple[str, tuple[str, int, int]]:
    """``(kind, (leaf level, first, last))`` of a proxy's metadata; raise if malformed."""
    kind, (level, first, last) = meta[PROXY_KIND], meta[COVERS]
    if not isinstance(kind, str) or not isinstance(level, str) or int(first) > int(last):
        raise TypeError
    return kind, (level, int(first), int(last))


C = TypeVar("C", Hit, Scored, Candidate)


def dedupe_hits(hits: Sequence[C]) -> list[C]:
    """One hit per key (its best score), best first.

    Ties go in document order (source key, then split id), whatever order the
    engine returned them in and whatever generation a source is at.
    """
    if len(set(map(_KEY_OF, hits))) == len(hits):  # a search's usual answer: no key twice
        out = list(hits)
    else:
        best: dict[str, C] = {}
        for hit in hits:
            if hit.key not in best or hit.score > best[hit.key].score:
                best[hit.key] = hit
        out = list(best.values())
    scores = list(map(_SCORE_OF, out))
    if not all(map(ge, scores, islice(scores, 1, None))):  # not best first (ties aside)
        out.sort(key=_SCORE_OF, reverse=True)  # stable
        scores = list(map(_SCORE_OF, out))
    # each group of equal scores in document order: the places where a score repeats
    tied = list(compress(count(), map(eq, scores, islice(scores, 1, None))))
    i = 0
    while i < len(tied):
        j = i
        while j + 1 < len(tied) and tied[j + 1] == tied[j] + 1:
            j += 1
        first, last = tied[i], tied[j] + 1  # out[first : last + 1] score the same
        out[first : last + 1] = sorted(out[first : last + 1], key=_document_order)
        i = j + 1
    return out


_SCORE_OF = attrgetter("score")
_KEY_OF = attrgetter("key")


def _document_order(hit: Candidate) -> tuple[str, int]:
    return base_source_key(hit.source_key), hit.split_id


@dataclass(frozen=True)
class Placed:
    """What a mode places, planned from the hits' keys and scores before any is read."""

    positions: list[int]
    """The places in the ranking of the hits it places: these must be read."""
    groups: Callable[[Sequence[Candidate]], list[Group]]
    """Its results, best first, from the same ranking with those hits read."""


@dataclass
class Group:
    """One future result: the hits it holds and the node keys it needs."""

    source_key: str
    source_id: str
    keys: list[str]
    hits: list[Hit]
    level: str
    start: int
    end: int
    escalation: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float:
        """A result's score is the best score of its hits (max aggregation)."""
        return max(hit.score for hit in self.hits)


def rank(groups: Sequence[Group]) -> list[Group]:
    """Best score first; ties in document order (source key, then start)."""
    return sorted(groups, key=lambda g: (-g.score, base_source_key(g.source_key), g.start))


def result_metadata(group: Group, mode: str, base: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata every returned document carries (the node's own user metadata too).

    ``heading``: the contextual header of the result's best match (of equal
    scores, the first in the text), when the retriever writes headers.
    """
    meta = user_metadata(base)
    meta["score"] = group.score
    meta["mode"] = mode
    meta["source_id"] = group.source_id
    meta["start"] = group.start
    meta["end"] = group.end
    meta["level"] = group.level
    meta["matches"] = [hit.match() for hit in sorted(group.hits, key=_start)]
    best = min(group.hits, key=_best_first)
    if best.heading:
        meta[HEADING] = best.heading
    if group.escalation:
        meta["escalation"] = group.escalation
    return meta


def _start(hit: Hit) -> int:
    return hit.start


def _best_first(hit: Hit) -> tuple[float, int]:
    """The best match first; of equal scores, the first in the text."""
    return -hit.score, hit.start


class MissingNodeError(LookupError):
    """A node the index points at is not in the parent store."""


RESOLUTION_EVENT = "langchain_s2b.resolution"
"""Name of the custom callback event every retrieval run emits (see :func:`summary`)."""
_SUMMARY_FIELDS = ("mode", "level", "escalation", "score", "source_id", "start", "end")


def summary(docs: Sequence[Document]) -> dict[str, Any]:
    """What a run resolved to, for tracers: one entry per returned document."""
    results = []
    for doc in docs:
        entry = {name: doc.metadata.get(name) for name in _SUMMARY_FIELDS}
        entry["matches"] = [
            {k: m[k] for k in ("score", "start", "end")} for m in doc.metadata.get("matches", [])
        ]
        results.append(entry)
    return {"results": results}
