"""Evidence before context: how parent, window and multilevel mode spend a reached ceiling.

A ceiling that the mode's whole results fit changes nothing (the callers check
that first). When it is reached, the budget is spent in three steps:

1. **Evidence.** Every evidence hit of the chosen results, in rank order, gets
   its own leaf while that leaf fits what is left (:func:`seed`). A hit that
   would start a result past ``k`` is passed over. Nothing else is spent
   before every such hit was placed, so an equal hit is never dropped while
   the budget holds its leaf.
2. **Whole nodes that pay.** The mode may then hand back a node whole (a
   parent, a paragraph, a section, the document) when it fits what is left
   and its evidence earns its tokens (:func:`pays`).
3. **Context by worth.** Every other result grows from its hits inside its
   *slot* (the window, parent or paragraph it may not leave), one leaf at a
   time, the most valuable neighbour of any result first (:func:`grow`): a
   leaf is worth ``sum(1 / (rank + 1) * 0.5 ** distance)`` over the hits of
   its slot, ``rank`` a hit's place in the evidence (pack mode weighs its
   seeds the same way), while it fits. Ties go to the leaf nearer a hit, then
   by position. A slot's runs that meet become one.

Each run of consecutive leaves is a result; one that grew to its whole slot
is the slot's whole result. Leaves are read from the docstore a few at a time
(:data:`~langchain_s2b.core.ceiling.RING` on each side of a hit, more as a run
reaches the edge of what was read); a leaf the docstore lacks ends a run there.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from langchain_s2b.core.budget import TokenCounter
from langchain_s2b.core.ceiling import RING, Bounds, Cut, Leaves
from langchain_s2b.core.hits import Hit
from langchain_s2b.core.keys import base_source_key, level_prefix
from langchain_s2b.core.merge import Chunk, leaf_chunk, merge_chunks
from langchain_s2b.core.requests import LeafRead, Op, ReadRuns, ask
from langchain_s2b.core.splitters import SentenceSplitter
from langchain_s2b.core.tree import tile

DECAY = 0.5
"""A leaf's worth per step away from a hit."""


@dataclass
class Run:
    """Consecutive leaves ``[first, last]`` of one slot, merged exactly."""

    first: int
    last: int
    chunk: Chunk
    tokens: int


@dataclass
class Slot:
    """Where one result's runs grow: its bounds, its hits (rank order) and its runs so far."""

    source_key: str
    level: str
    n_splits: int | None
    bounds: Bounds
    hits: list[Hit]
    runs: list[Run] = field(default_factory=list)
    whole: bool = False
    """Taken whole (step 2): its runs are inside the whole and grow no more."""
    blocked: set[int] = field(default_factory=set)
    """Leaves it may not take (parent mode: a chunk cut into sentences, a slot of its own)."""

    @property
    def tokens(self) -> int:
        """Tokens its runs hold."""
        return sum(run.tokens for run in self.runs)

    def run_at(self, split: int) -> Run | None:
        """The run that holds leaf ``split``."""
        return next((r for r in self.runs if r.first <= split <= r.last), None)


def read_around(slots: Sequence[Slot], sources: dict[str, Leaves], radius: int = RING) -> Op[None]:
    """Read the leaves within ``radius`` of every hit of ``slots`` (in its bounds): one read."""
    wanted: dict[str, tuple[Leaves, set[int]]] = {}
    for slot in slots:
        leaves = leaves_of(slot, sources)
        _, need = wanted.setdefault(level_prefix(leaves.source_key, leaves.level), (leaves, set()))
        for hit in slot.hits:
            lo = max(hit.split_id - radius, slot.bounds.lo)
            hi = hit.split_id + radius
            if slot.bounds.hi is not None:
                hi = min(hi, slot.bounds.hi)
            need.update(leaves.unread(lo, hi))
    yield from read_runs([(leaves, sorted(need)) for leaves, need in wanted.values()])


def read_runs(wanted: Sequence[tuple[Leaves, list[int]]]) -> Op[None]:
    """Read these leaves (split ids, ascending, per source) in runs (:class:`ReadRuns`).

    Each run of consecutive split ids is one run of keys; every leaf read is
    handed to its source's leaves (``None``: missing).
    """
    runs: list[tuple[str, int, int]] = []
    homes: list[Leaves] = []
    for leaves, splits in wanted:
        prefix = level_prefix(leaves.source_key, leaves.level)
        for lo, hi in _consecutive(splits):
            runs.append((prefix, lo, hi))
            homes.append(leaves)
    if not runs:
        return
    values = yield from ask(ReadRuns(runs))
    for leaves, (_, lo, _), got in zip(homes, runs, values, strict=True):
        for split, doc in enumerate(got, start=lo):
            leaves.known[split] = None if doc is None else leaf_chunk(doc, split)


def _consecutive(splits: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` of each run of consecutive ids in ascending ``splits``."""
    out: list[tuple[int, int]] = []
    for split in splits:
        if out and out[-1][1] == split - 1:
            out[-1] = (out[-1][0], split)
        else:
            out.append((split, split))
    return out


def read_into(sources: Mapping[str, Leaves], fetched: Mapping[str, LeafRead | None]) -> None:
    """Hand each leaf read to the leaves of its source: one pass over the read."""
    by_prefix = {
        level_prefix(leaves.source_key, leaves.level): leaves for leaves in sources.values()
    }
    for key, doc in fetched.items():
        head, _, split = key.rpartition("/")
        leaves = by_prefix.get(head + "/")
        if leaves is not None and split.isdigit():
            number = int(split)
            leaves.known[number] = None if doc is None else leaf_chunk(doc, number)


def leaves_of(slot: Slot, sources: dict[str, Leaves]) -> Leaves:
    """The leaves read so far of a slot's source."""
    key = f"{slot.source_key}\x00{slot.level}"
    if key not in sources:
        sources[key] = Leaves(slot.source_key, slot.level, slot.n_splits)
    return sources[key]


def leaf(slot: Slot, split: int, sources: Mapping[str, Leaves]) -> Chunk | None:
    """Leaf ``split`` of the slot when it was read, exists and lies inside the slot."""
    leaves = sources.get(f"{slot.source_key}\x00{slot.level}")
    found = None if leaves is None or split in slot.blocked else leaves.known.get(split)
    if found is None or not slot.bounds.holds(split, found):
        return None
    return found


def seed(
    slots: Sequence[Slot],
    order: Sequence[tuple[int, Hit]],
    left: int,
    count: int | None,
    counter: TokenCounter,
    sources: dict[str, Leaves],
) -> int:
    """Step 1: each hit's own leaf, in rank order, while it fits; returns what is left.

    ``order``: ``(slot index, hit)`` in rank order. ``count``: the most runs
    (results) there may be; a hit that would start one more is passed over.
    """
    for index, hit in order:
        slot = slots[index]
        if slot.whole or slot.run_at(hit.split_id) is not None:
            continue
        own = leaf(slot, hit.split_id, sources)
        if own is None:
            continue
        touching = [
            r for r in slot.runs if r.last + 1 == hit.split_id or r.first - 1 == hit.split_id
        ]
        if not touching and count is not None and sum(len(s.runs) for s in slots) >= count:
            continue
        left = _or(_join(slot, hit.split_id, own, left, counter), left)
    return left


def _or(joined: int | None, left: int) -> int:
    return left if joined is None else joined


def _join(slot: Slot, split: int, own: Chunk, left: int, counter: TokenCounter) -> int | None:
    """Add leaf ``split`` to the slot when it fits ``left`` (joining the runs it touches).

    What is left then, or ``None`` when it does not fit (nothing changes).
    """
    near = [r for r in slot.runs if r.last + 1 == split or r.first - 1 == split]
    chunks = [own, *(r.chunk for r in near)]
    merged = merge_chunks(chunks)
    tokens = counter(merged.text)
    cost = tokens - sum(r.tokens for r in near)
    if cost > left:
        return None
    first = min([split, *(r.first for r in near)])
    last = max([split, *(r.last for r in near)])
    slot.runs = [r for r in slot.runs if r not in near]
    slot.runs.append(Run(first, last, Chunk(merged.start, merged.end, merged.text, first), tokens))
    slot.runs.sort(key=lambda r: r.first)
    return left - cost


def worth(split: int, hits: Sequence[Hit], ranks: Mapping[str, int]) -> float:
    """What a leaf adds to a slot: ``1 / (rank + 1) * 0.5 ** distance`` summed over its hits."""
    return sum(DECAY ** abs(split - h.split_id) / (ranks[h.key] + 1) for h in hits)


def grow(
    slots: Sequence[Slot],
    ranks: Mapping[str, int],
    left: int,
    counter: TokenCounter,
    sources: dict[str, Leaves],
    *,
    hits_too: bool = False,
    count: int | None = None,
) -> Op[int]:
    """Step 3: grow the runs of every slot not taken whole, worth most first; what is left.

    ``hits_too`` (:func:`returning`'s trial): every hit's own leaf is on offer
    from the start too, and a leaf that would start one more run than
    ``count`` is passed over.
    """
    heap: list[tuple[float, int, str, int, int]] = []
    offered: set[tuple[int, int]] = set()

    def offer(index: int, split: int) -> None:
        slot = slots[index]
        if (index, split) in offered or not slot.bounds.within(split) or split < 0:
            return
        if slot.n_splits is not None and split >= slot.n_splits:
            return
        offered.add((index, split))
        near = min(abs(split - h.split_id) for h in slot.hits)
        value = worth(split, slot.hits, ranks)
        heapq.heappush(heap, (-value, near, base_source_key(slot.source_key), split, index))

    for index, slot in enumerate(slots):
        if not slot.whole:
            for run in slot.runs:
                offer(index, run.first - 1)
                offer(index, run.last + 1)
            for hit in slot.hits if hits_too else ():
                offer(index, hit.split_id)
    while heap and left > 0:
        _, _, _, split, index = heapq.heappop(heap)
        slot = slots[index]
        if slot.run_at(split) is not None:
            continue
        alone = not any(r.last + 1 == split or r.first - 1 == split for r in slot.runs)
        if alone and count is not None and sum(len(s.runs) for s in slots) >= count:
            continue
        leaves = leaves_of(slot, sources)
        if split not in leaves.known:
            yield from _read_more(slot, split, leaves)
        own = leaf(slot, split, sources)
        if own is None:
            continue
        joined = _join(slot, split, own, left, counter)
        if joined is not None:
            left = joined
            offer(index, split - 1)
            offer(index, split + 1)
    return left


def returning(
    slots: Sequence[Slot],
    ranks: Mapping[str, int],
    relevance: Mapping[str, float],
    budget: int,
    count: int | None,
    counter: TokenCounter,
    sources: dict[str, Leaves],
) -> Op[set[str]]:
    """The hits that come back: what a budget spent by worth alone would reach, ties whole.

    A trial spends ``budget`` on the slots' hits and their neighbours together,
    worth most first (as pack mode does, inside the slots): a weak hit's own
    sentence is worth less than the best hit's next-door one. The hits whose
    leaf the trial took come back, and every hit as relevant as one of them (so
    of equal hits, all or none); :func:`seed` gives each its own leaf before
    any context is grown.
    """
    trial = [Slot(s.source_key, s.level, s.n_splits, s.bounds, list(s.hits)) for s in slots]
    yield from grow(trial, ranks, budget, counter, sources, hits_too=True, count=count)
    taken = {h.key for _, h in placed(trial)}
    tied = {relevance[key] for key in taken}
    return taken | {h.key for slot in slots for h in slot.hits if relevance[h.key] in tied}


def _read_more(slot: Slot, split: int, leaves: Leaves) -> Op[None]:
    """Read the leaves around ``split``, away from the runs, ``RING`` of them and more."""
    radius = RING
    while split not in leaves.known and leaves.exists(split):
        lo, hi = split - radius, split + radius
        splits = leaves.unread(
            max(lo, slot.bounds.lo), hi if slot.bounds.hi is None else min(hi, slot.bounds.hi)
        )
        if not splits:
            return
        yield from read_runs([(leaves, splits)])
        radius *= 2


def as_cut(run: Run, slot: Slot) -> Cut:
    """A run as a :class:`~langchain_s2b.core.ceiling.Cut`, with the slot's hits inside it."""
    inside = [h for h in slot.hits if run.first <= h.split_id <= run.last]
    chunk = run.chunk
    return Cut(run.first, run.last, chunk.text, chunk.start, chunk.end, run.tokens, inside)


def coverage(
    placed: Sequence[tuple[Slot, Hit]],
    start: int,
    end: int,
    reach: int,
    sources: Mapping[str, Leaves],
) -> float:
    """The share of ``[start, end)``'s characters within ``reach`` leaves of a placed hit.

    ``placed``: the hits whose leaf was taken, each with its slot (its parent
    or paragraph); the leaves counted lie in that slot.
    """
    spans: set[tuple[int, int]] = set()
    for slot, hit in placed:
        for split in range(hit.split_id - reach, hit.split_id + reach + 1):
            chunk = leaf(slot, split, sources)
            if chunk is not None and start <= chunk.start and chunk.end <= end:
                spans.add((chunk.start, chunk.end))
    covered = sum(b - a for a, b in spans)
    return covered / (end - start) if end > start else 1.0


def placed(slots: Sequence[Slot]) -> list[tuple[Slot, Hit]]:
    """The hits of ``slots`` whose own leaf was taken, with their slot."""
    return [(slot, hit) for slot in slots for hit in slot.hits if slot.run_at(hit.split_id)]


def pays(cover: float, cost: int, left: int, budget: int) -> bool:
    """Whether a node comes back whole: it fits, and its evidence covers enough of it.

    The coverage asked for rises as the budget fills: it must be at least the
    share of the budget that would be spent once the node is taken. A node
    that takes a tenth of an empty budget needs a tenth of it covered; one
    that would fill the budget needs all of it.
    """
    if cost > left:
        return False
    spent = budget - left + cost
    return cover >= spent / budget if budget > 0 else False


# Parent mode's fine cuts: a slot's leaves cut at sentence boundaries ------------------

_SENTENCES = SentenceSplitter(max_tokens=10**9)
_WORD = re.compile(r"\w+")


def divisible(text: str) -> bool:
    """Whether a leaf holds more than one sentence (so a fine cut can take less of it)."""
    return len(_SENTENCES.split_spans(text)) > 1


def _shared(
    terms: set[str], texts: Sequence[str], numbers: Sequence[int]
) -> Callable[[int], tuple[float, int]]:
    """How much a sentence of a chunk shares with the query (the key of the best).

    Its query words, each weighing ``log(n / df)`` over the chunk's ``n``
    sentences: a word in every sentence ("the") weighs nothing, in any
    language. Of equal ones, the first.
    """
    words = [_words(text) & terms for text in texts]
    df: dict[str, int] = {}
    for found in words:
        for word in found:
            df[word] = df.get(word, 0) + 1
    weight = {word: math.log(len(texts) / n) for word, n in df.items()}
    score = {
        number: sum(weight[w] for w in found) for number, found in zip(numbers, words, strict=True)
    }
    return lambda number: (score[number], -number)


def _words(text: str) -> set[str]:
    return {word.casefold() for word in _WORD.findall(text)}


@dataclass
class Fine:
    """A slot whose leaves were cut into sentences: the finer slot and the way back."""

    slot: Slot
    leaf_of: dict[int, int]
    """Each sentence's leaf (split id)."""
    hits: dict[str, Hit]
    """The original hits, by key."""


def sentence_slot(slot: Slot, query: str, sources: dict[str, Leaves]) -> Fine:
    """``slot`` with each of its read leaves cut into its sentences (so a cut can be finer).

    The sentences are numbered in text order (a missing leaf leaves a gap in the
    numbers, so no run crosses it) and read into ``sources`` under a level of
    their own. Each hit becomes the sentence of its leaf that shares the most
    with ``query`` (:func:`_shared`): a ~300-token chunk matched as a whole,
    and the query's own words say where in it.
    """
    level = f"{slot.level}~{slot.bounds.start}~{slot.bounds.lo}"
    fine = Leaves(slot.source_key, level, None)
    leaf_of: dict[int, int] = {}
    first_of: dict[int, list[int]] = {}
    index, previous = 0, None
    sentences: dict[int, Chunk] = {}
    for split in sorted(leaves_of(slot, sources).known):
        chunk = leaf(slot, split, sources)
        if chunk is None:
            continue
        if previous is not None and split != previous + 1:
            index += 1  # a missing leaf: no run crosses the gap
        previous = split
        for a, b in tile(_SENTENCES.split_spans(chunk.text), len(chunk.text)):
            sentences[index] = Chunk(chunk.start + a, chunk.start + b, chunk.text[a:b], index)
            leaf_of[index] = split
            first_of.setdefault(split, []).append(index)
            index += 1
    fine.known.update(sentences)
    fine.n_splits = index
    sources[f"{slot.source_key}\x00{level}"] = fine
    terms = _words(query)
    hits: list[Hit] = []
    for hit in slot.hits:
        options = first_of.get(hit.split_id)
        if not options:
            continue
        best = max(options, key=_shared(terms, [sentences[i].text for i in options], options))
        own = sentences[best]
        hits.append(
            hit._replace(
                split_id=best,
                level=level,
                start=own.start,
                end=own.end,
                text=own.text,
                n_splits=index,
            )
        )
    finer = Slot(slot.source_key, level, index, Bounds(lo=0, hi=max(index - 1, 0)), hits)
    return Fine(finer, leaf_of, {hit.key: hit for hit in slot.hits})


FINE_SHARE = 4
"""Parent mode: a hit's chunk is placed whole while it costs at most this share of the budget
(a quarter); else the hit comes back as its sentence (fine cuts)."""


def seed_parents(
    slots: list[Slot],
    order: list[tuple[int, Hit]],
    query: str,
    budget: int,
    count: int | None,
    counter: TokenCounter,
    sources: dict[str, Leaves],
    fines: list[tuple[int, Fine]],
) -> int:
    """Parent mode's step 1, with fine cuts; returns what is left.

    Each hit in rank order gets its chunk (the leaf it matched) when the chunk
    costs at most a :data:`FINE_SHARE` of the budget or holds one sentence;
    else the chunk is cut into sentences (:func:`sentence_slot`), becomes a
    slot of its own that the parent's runs no longer enter (added to
    ``fines``), and the hit gets the sentence that stands for it. Each while it
    fits, and never a result past ``count``.
    """
    left = budget
    for index, hit in order:
        slot = slots[index]
        if slot.whole or slot.run_at(hit.split_id) is not None:
            continue
        own = leaf(slot, hit.split_id, sources)
        if own is None:
            continue
        every = [*slots, *(f.slot for _, f in fines)]
        if counter(own.text) * FINE_SHARE <= budget or not divisible(own.text):
            left = seed(every, [(index, hit)], left, count, counter, sources)
            continue
        bounds = Bounds(start=own.start, end=own.end)
        fine = sentence_slot(
            Slot(slot.source_key, slot.level, slot.n_splits, bounds, [hit]), query, sources
        )
        slot.blocked.add(hit.split_id)
        fines.append((index, fine))
        every.append(fine.slot)
        left = seed(
            every, [(len(every) - 1, h) for h in fine.slot.hits], left, count, counter, sources
        )
    return left


def coarse(found: Cut, fine: Fine) -> Cut:
    """A run of sentences as a cut of the parent's leaves.

    Its ``split_ids`` are the leaves it takes from; each match is its leaf
    (key, split id, score) with the span of the sentence that stood for it.
    """
    leaves = [fine.leaf_of[i] for i in range(found.first, found.last + 1)]
    hits = [
        h._replace(
            split_id=fine.hits[h.key].split_id,
            level=fine.hits[h.key].level,
            n_splits=fine.hits[h.key].n_splits,
        )
        for h in found.hits
    ]
    return replace(found, first=min(leaves), last=max(leaves), hits=hits)
