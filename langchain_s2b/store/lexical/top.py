"""The ``n`` best of a lexical engine's ranking, equal scores taken by key (not the engine's order).

BM25 gives many leaves the same score (one query word in leaves of one length),
and an engine returns equal scores in its own order (tantivy: by document
address, which follows the history of its segments). Taken by key, the answer
never depends on that history.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import itemgetter
from typing import Any

Hits = Sequence[tuple[float, Any]]
"""An engine's answer: ``(score, address)``, best first."""
Read = Callable[[Sequence[Any]], list[tuple[str, dict[str, Any]]]]
"""Leaves' ``(key, metadata)`` at these addresses, in their order."""

_KEY, _SCORE = itemgetter(0), itemgetter(1)
"""A ``(key, score)`` pair's key and score (and a ``(key, metadata)`` pair's key)."""
_HIT_SCORE, _ADDRESS = itemgetter(0), itemgetter(1)
"""An engine's ``(score, address)``: its score and its address."""


def short_depth(n: int) -> int:
    """The first search's depth while ties rarely reach past it: a quarter past ``n``, and one."""
    return n + n // 4 + 1


def long_depth(n: int) -> int:
    """The first search's depth once ties often reach past :func:`short_depth`: ``2n + 1``."""
    return 2 * n + 1


LONG_SHARE = 0.05
"""The share of searches whose tie at the cut reached past :func:`short_depth` above which the
first search goes :func:`long_depth` deep."""
RATE = 1 / 16
"""How fast :class:`FirstDepth` follows that share (an exponential moving average)."""


class FirstDepth:
    """How deep an index's first search goes, learnt from the ties of its own searches.

    A group of equal BM25 scores often straddles the ``n``-th place (a query
    word in leaves of one length); any part of it the first search leaves out
    costs a second, deeper search (:func:`top_by_key`), and each search scores
    every leaf that matches. Going deeper first costs little over a small
    index and nothing next to that scoring over a large one, where the groups
    grow. Measured on the benchmark's corpus (the SQuAD articles' paragraphs,
    grown) with 400 questions, 100 asked: the group reached 26 past the cut
    (past ``n + n // 4 + 1``) for 0% of queries at 10k leaves, 0.5% at 100k
    and 49% at 1M; tantivy's top 126 cost 5% more than its top 100 at 10k,
    its top 201 22% more. So the first search goes :func:`short_depth` deep
    while fewer than :data:`LONG_SHARE` of the searches need more, and
    :func:`long_depth` deep (one round, as a rule) once more do. The answers
    never depend on it: only how many searches find them.
    """

    def __init__(self) -> None:
        self.share = 0.0
        """Moving share of searches whose tie at the cut reached past :func:`short_depth`."""

    def __call__(self, n: int) -> int:
        """The depth of the first search for ``n``."""
        return long_depth(n) if self.share > LONG_SHARE else short_depth(n)

    def saw(self, found: Hits, n: int) -> None:
        """Learn from one search's deepest answer (best first) for ``n``."""
        short = short_depth(n)
        past = len(found) >= short and found[n - 1][0] == found[short - 1][0]
        self.share += RATE * (past - self.share)


def top_by_key(
    search: Callable[[int], Hits],
    read: Read,
    n: int,
    keep: Callable[[str, dict[str, Any]], bool] | None = None,
    *,
    ident: Callable[[Any], Hashable] = lambda address: address,
    first: Callable[[int], int] = short_depth,
) -> list[tuple[str, float]]:
    """The ``n`` best ``(key, score)``, best first, equal scores by key.

    ``search(depth)`` is asked for ``first(n)`` first (a
    :class:`FirstDepth` learns it, and hears of each answer; default
    :func:`short_depth`); while the ``n``-th score is still the lowest it
    returned, equal ones may lie past it, so it goes twice as deep.
    ``read(addresses)`` gives their leaves' keys and metadata, in one call per
    round; only the leaves that can come back (the ``n`` best and
    every leaf tied with the ``n``-th) are read, each once. With ``keep``, only
    leaves for which ``keep(key, metadata)`` holds count, and the search goes
    deeper until ``n`` are kept or no more match (``ident(address)`` names a
    leaf across rounds, so none is read twice).
    """
    depth = first(n)
    if keep is None:
        while True:
            found = search(depth)
            if len(found) < depth or found[n - 1][0] > found[-1][0]:
                break
            depth *= 2  # equal scores may lie past the cut
        if isinstance(first, FirstDepth):
            first.saw(found, n)
        end = min(n, len(found))  # best first: the n best and their ties
        cut = found[end - 1][0] if found else 0.0
        while end < len(found) and found[end][0] >= cut:
            end += 1
        chosen = found[:end]
        read_all = read(list(map(_ADDRESS, chosen)))
        scores = map(float, map(_HIT_SCORE, chosen))
        return _by_key(list(zip(map(_KEY, read_all), scores, strict=True)), n)
    known: dict[Hashable, tuple[str, dict[str, Any]]] = {}
    while True:
        found = search(depth)
        every = len(found) < depth  # every match returned
        new = {ident(a): a for _, a in found if ident(a) not in known}
        known.update(zip(new, read(list(new.values())), strict=True))
        pairs = []
        for score, address in found:
            key, meta = known[ident(address)]
            if keep(key, meta):
                pairs.append((key, float(score)))
        pairs = _by_key(pairs, len(pairs))
        if every or (len(pairs) >= n and pairs[n - 1][1] > found[-1][0]):
            return pairs[:n]  # the n-th scores above every leaf left out: no tie at the cut
        depth *= 2


def _by_key(pairs: list[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """The first ``n`` of ``(key, score)`` by score, best first, equal scores by key."""
    pairs.sort(key=_KEY)
    pairs.sort(key=_SCORE, reverse=True)  # stable: equal scores stay by key
    return pairs[:n]
