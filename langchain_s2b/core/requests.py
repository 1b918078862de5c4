"""The I/O requests that every operation yields, each with the type of its answer.

Retrieval, batch, add/delete and verify are generators (:data:`Op`) that
yield these requests and receive the answers;
:class:`~langchain_s2b.store.runner.Runner` carries them out, synchronously or
asynchronously. Pure code asks through :func:`ask`, which types the answer.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from langchain_core.documents import Document

from langchain_s2b.core.hits import Candidate, Hit
from langchain_s2b.core.merge import Chunk, SpanText, WholeLeaf
from langchain_s2b.core.propose import ProxyPiece
from langchain_s2b.core.situate import Piece

T = TypeVar("T")
A = TypeVar("A", covariant=True)
Vector = list[float] | None
"""A query vector; ``None`` when the child index embeds queries itself."""


class Found(NamedTuple):
    """A search's hits, best first, and whether the index is exhausted.

    A hit may come unread (:class:`~langchain_s2b.core.hits.Scored`): its key
    and score only, read when a mode places it (:class:`ReadHits`).
    """

    hits: Sequence[Candidate]
    exhausted: bool
    tied: float | None = None
    """The score of a group of equal scores that the cut left out (``None``: none was)."""
    joined: TextHits | None = None
    """With :attr:`Search.lexical`, :class:`SearchText`'s answer for these hits (``known``:
    their keys), given in the same request (``None``: the caller asks it)."""


class Request(Generic[A]):
    """An I/O request whose answer has type ``A``."""


@dataclass(frozen=True)
class EmbedQuery(Request[Vector]):
    """Embed one query."""

    query: str


@dataclass(frozen=True)
class EmbedQueries(Request[list[Vector]]):
    """Embed many queries, in one model call when the model allows it."""

    queries: list[str]


@dataclass(frozen=True)
class Search(Request[Found]):
    """The ``fetch`` nearest children of one query.

    With ``lexical`` (hybrid search), a child index that joins BM25's list to
    the search on rows (``FaissIndex``, unfiltered, no proxy among the hits)
    answers :class:`SearchText` for its ``lexical`` best in the same request
    (:attr:`Found.joined`); any other answers the search alone.
    """

    vector: Vector
    query: str
    fetch: int
    filter: Any
    lexical: int = 0


class TextHits(NamedTuple):
    """BM25's answer to :class:`SearchText`: its list, and its leaves the dense search missed."""

    hits: list[tuple[str, float]]
    """The ``n`` best leaves as ``(key, score)``, best first."""
    scored: dict[str, Candidate | None]
    """Each leaf of :attr:`hits` outside ``known`` (proxies aside) as :class:`LeafHits` answers
    it: its hit, scored against the query vector; ``None`` where ``LeafHits`` leaves it out."""


@dataclass(frozen=True)
class SearchText(Request[TextHits]):
    """The ``n`` best leaves that pass ``filter``, by BM25 over their text, as ``(key, score)``.

    Hybrid fusion needs the dense score of every leaf BM25 finds: those the
    dense search did not return (not in ``known``, and not a proxy: a
    proxy's covers are the caller's) come scored against ``vector`` in the
    same request (:attr:`TextHits.scored`); an index with row numbers joins the
    two lists on rows, without parsing keys back (issue 34). Empty when the
    child index has no lexical part (``hybrid=False``).
    """

    query: str
    n: int
    filter: Any
    vector: Vector = None
    known: frozenset[str] = frozenset()


@dataclass(frozen=True)
class LexicalKeys(Request[set[str] | None]):
    """Every leaf key the lexical index holds (``None``: there is none, ``hybrid=False``)."""


@dataclass(frozen=True)
class RebuildLexical(Request[None]):
    """Build the lexical index again from the child index or the docstore (repair)."""


@dataclass(frozen=True)
class LeafHits(Request[dict[str, Candidate]]):
    """These leaves as hits of one query vector, by key: each scored as a search would score it.

    Leaves the index does not hold, that ``filter`` leaves out, or that it can
    not score are left out. A hit may come unread, like a search's.
    """

    keys: list[str]
    filter: Any
    vector: Vector


@dataclass(frozen=True)
class ReadHits(Request[dict[str, Hit]]):
    """Read these children as hits, by key (their scores are the caller's to set).

    A child gone since the search that found it is left out.
    """

    keys: list[str]


@dataclass(frozen=True)
class Rerank(Request[list[Document]]):
    """Documents reordered (and perhaps dropped) by a ``BaseDocumentCompressor`` for a query."""

    reranker: Any
    query: str
    documents: list[Document]


@dataclass(frozen=True)
class SearchMany(Request[list[Found]]):
    """:class:`Search` for many queries of one ``fetch`` and filter (one matrix search)."""

    vectors: list[Vector]
    queries: list[str]
    fetch: int
    filter: Any


@dataclass(frozen=True)
class Fetch(Request[list[Document | None]]):
    """One batched ``mget`` of node keys."""

    keys: list[str]


LeafRead = Document | Chunk | WholeLeaf
"""A leaf as :class:`ReadLeaves` reads it: its chunk, its chunk with its metadata, or the
stored document."""


def read_whole(leaf: LeafRead) -> Document:
    """A leaf that was read as a document (a :class:`Fetch`, or any store's :class:`ReadLeaves`)."""
    if not isinstance(leaf, Document):
        split = (leaf.chunk if isinstance(leaf, WholeLeaf) else leaf).split_id
        msg = f"Leaf {split} was read as a chunk where its document is needed."
        raise RuntimeError(msg)
    return leaf


def leaf_metadata(leaf: LeafRead) -> dict[str, Any]:
    """The stored metadata of a leaf read whole (a key in :attr:`ReadLeaves.whole`, or fetched)."""
    if isinstance(leaf, WholeLeaf):
        return leaf.metadata
    return read_whole(leaf).metadata


@dataclass(frozen=True)
class ReadLeaves(Request[list[LeafRead | None]]):
    """One batched read of the leaves a result is assembled from (``None``: missing).

    A store that keeps nodes as spans
    (:class:`~langchain_s2b.store.nodes.node_store.NodeStore`) answers a
    node with its :class:`~langchain_s2b.core.merge.Chunk` (split id: its
    key's), and builds no ``Document``; a key in ``whole`` with its chunk and
    its stored metadata (:class:`~langchain_s2b.core.merge.WholeLeaf`: what a
    window's first leaf is read for). Every other key, and every key of any
    other store, comes back as the stored document (one ``mget``, as
    :class:`Fetch`); :func:`leaf_metadata` reads the metadata of either.
    """

    keys: list[str]
    whole: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ReadSpans(Request[list[SpanText | None]]):
    """Runs of leaves, each ``(key prefix, lo, hi)``: leaves ``lo..hi`` under one prefix.

    A store that keeps nodes as spans
    (:class:`~langchain_s2b.store.nodes.node_store.NodeStore`) answers a run
    whose leaves are all held as slices of their source, with no gap between
    them, as one :class:`~langchain_s2b.core.merge.SpanText`: what
    :class:`ReadLeaves` of its keys, merged, gives, read as one slice (issue
    34: a window is one read, not one per leaf). Any other run, and every run
    of any other store, is ``None``: read it by :class:`ReadLeaves`.
    """

    spans: list[tuple[str, int, int]]


@dataclass(frozen=True)
class ReadRuns(Request[list[list[LeafRead | None]]]):
    """:class:`ReadLeaves` of runs of keys, each ``(key prefix, lo, hi)``: one list per run.

    Run ``(prefix, lo, hi)`` stands for the keys ``prefix + str(i)`` for ``i``
    in ``lo..hi``, and its answer is what :class:`ReadLeaves` of those keys
    gives, in that order. A store that keeps nodes as spans
    (:class:`~langchain_s2b.store.nodes.node_store.NodeStore`) reads a run
    from its columns' slices, with no key made or parsed per leaf (issue 34:
    a reached ceiling reads ~400 leaves a query, in runs around its hits);
    any other store is asked one ``mget`` of every run's keys.
    """

    runs: list[tuple[str, int, int]]

    def keys(self) -> list[str]:
        """Every run's keys, in order."""
        return [f"{prefix}{i}" for prefix, lo, hi in self.runs for i in range(lo, hi + 1)]

    def by_run(self, values: Sequence[LeafRead | None]) -> list[list[LeafRead | None]]:
        """The values of :meth:`keys` (in order), one list per run."""
        out, at = [], 0
        for _, lo, hi in self.runs:
            size = max(hi - lo + 1, 0)
            out.append(list(values[at : at + size]))
            at += size
        return out


@dataclass(frozen=True)
class Put(Request[None]):
    """One batched ``mset`` of nodes."""

    pairs: Sequence[tuple[str, Document]]


@dataclass(frozen=True)
class Remove(Request[None]):
    """One batched ``mdelete`` of node keys."""

    keys: list[str]


@dataclass(frozen=True)
class EmbedLeaves(Request[list[list[float]] | None]):
    """Embed leaf texts ahead of writing (``None``: the child index embeds when it adds).

    Carried out without the write lock, so queries never wait for a model.
    """

    texts: list[str]


@dataclass(frozen=True)
class WriteContexts(Request[list[str]]):
    """A model-written context for each piece, from the cache or the context model.

    Carried out without the write lock, like :class:`EmbedLeaves`. Any failed
    call fails the request (the contexts written so far are cached).
    """

    pieces: list[Piece]


@dataclass(frozen=True)
class WriteProxies(Request[list[str]]):
    """The proxy model's answer for each piece (its proxies, unparsed), cached or asked for.

    Carried out without the write lock, like :class:`WriteContexts`. Any failed
    call fails the request (the answers written so far are cached).
    """

    pieces: list[ProxyPiece]


@dataclass(frozen=True)
class AddLeaves(Request[None]):
    """Index leaves under their keys, with their vectors (``None``: the index embeds them)."""

    leaves: list[Document]
    vectors: list[list[float]] | None = None


@dataclass(frozen=True)
class RemoveLeaves(Request[None]):
    """Delete leaves from the child index; keys it does not hold are ignored."""

    keys: list[str]


@dataclass(frozen=True)
class ScanKeys(Request[list[str]]):
    """Every key of the docstore."""


@dataclass(frozen=True)
class ListChildren(Request[tuple[set[str] | None, bool]]):
    """The child index's keys and whether that is all of them (``(None, False)``: unknowable).

    An index that can not be listed is asked which of ``candidates`` it holds.
    """

    candidates: list[str]


class ChildDamage(NamedTuple):
    """Where a child index's own parts disagree (an interrupted write whose undo failed)."""

    unindexed: list[str]
    """Leaf keys it holds a record for but no vector."""
    stray: int
    """Vectors it holds for no leaf."""


@dataclass(frozen=True)
class CheckChildren(Request[ChildDamage | None]):
    """Whether the child index's records and vectors agree (``None``: it can not say)."""


@dataclass(frozen=True)
class MendChildren(Request[None]):
    """Drop the child index's records without a vector and its vectors without a record."""


Op = Generator[Request[Any], Any, T]
"""An operation: yields requests, receives their answers, returns ``T``."""


def ask(request: Request[T]) -> Generator[Request[Any], Any, T]:
    """Yield one request and return its answer, typed.

    Usage: ``values = yield from ask(Fetch(keys))``.
    """
    answer: T = yield request
    return answer


def read_documents(read: dict[str, LeafRead | None], keys: Iterable[str]) -> Op[None]:
    """Read whole each of ``keys`` that :class:`ReadLeaves` gave as a chunk (one :class:`Fetch`).

    A store of documents gave them whole already: nothing is read again.
    """
    bare = [key for key in dict.fromkeys(keys) if isinstance(read.get(key), Chunk)]
    if not bare:
        return
    docs = yield from ask(Fetch(bare))
    for key, doc in zip(bare, docs, strict=True):
        if doc is None:  # one operation runs under the store's lock: not without a bug
            msg = f"Node {key!r} was read as a chunk, then was gone."
            raise RuntimeError(msg)
        read[key] = doc
