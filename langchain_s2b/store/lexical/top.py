"""The ``n`` best of a lexical engine's ranking, equal scores taken by key (not the engine's order).

BM25 gives many leaves the same score (one query word in leaves of one length),
and an engine returns equal scores in its own order (tantivy: by document
address, which follows the history of its segments). Taken by key, the answer
never depends on that history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Hits = Sequence[tuple[float, Any]]
"""An engine's answer: ``(score, address)``, best first."""


def top_by_key(
    search: Callable[[int], Hits],
    read: Callable[[Any], tuple[str, dict[str, Any]]],
    n: int,
    keep: Callable[[str, dict[str, Any]], bool] | None = None,
) -> list[tuple[str, float]]:
    """The ``n`` best ``(key, score)``, best first, equal scores by key.

    ``search(depth)`` is asked for ``2n + 1`` first; while the ``n``-th score
    is still the lowest it returned, equal ones may lie past it, so it goes
    twice as deep. ``read(address)`` gives a leaf's key and metadata; only the
    leaves that can come back (the ``n`` best and every leaf tied with the
    ``n``-th) are read, each once. With ``keep``, only leaves for which
    ``keep(key, metadata)`` holds count, and the search goes deeper until ``n``
    are kept or no more match.
    """
    depth = 2 * n + 1  # ties at the cut are common in BM25: one round mostly suffices
    known: dict[Any, tuple[str, dict[str, Any]]] = {}

    def read_once(address: Any) -> tuple[str, dict[str, Any]]:
        got = known.get(address)
        if got is None:
            got = known[address] = read(address)
        return got

    while True:
        found = search(depth)
        every = len(found) < depth  # every match returned
        if keep is None:
            if not every and found[n - 1][0] <= found[-1][0]:
                depth *= 2  # equal scores may lie past the cut
                continue
            cut = found[min(n, len(found)) - 1][0] if found else 0.0
            pairs = [(read_once(a)[0], float(s)) for s, a in found if s >= cut]
            pairs.sort(key=lambda pair: (-pair[1], pair[0]))
            return pairs[:n]
        pairs = []
        for score, address in found:
            key, meta = read_once(address)
            if keep(key, meta):
                pairs.append((key, float(score)))
        pairs.sort(key=lambda pair: (-pair[1], pair[0]))
        if every or (len(pairs) >= n and pairs[n - 1][1] > found[-1][0]):
            return pairs[:n]  # the n-th scores above every leaf left out: no tie at the cut
        depth *= 2
