"""Equal scores at the fetch cut: the answer never depends on an engine's tie order."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever

from ._embeddings import BagOfWords, ExactWords
from .test_reference_filters import INDEXES
from .test_reference_modes import (
    EMBEDDINGS,
    FILTERS,
    SENTENCE_SEP,
    SOURCE_IDS,
    TOPICS,
    WORDS,
    Case,
    options,
    queries,
    run,
    sentence_callable,
)
from .test_reference_modes import INDEXES as MODES_INDEXES

# Five paragraphs (parents) of one repeated sentence: every child scores the same.
TEXT = "\n\n".join(["Apple pie again."] * 5)


def _retriever(make: Any) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=make(BagOfWords()),
        child_splitter=lambda text: [text],
        parent_splitter=lambda text: text.split("\n\n"),
    )
    retriever.add_documents([Document(page_content=TEXT, id="t")])
    return retriever


@pytest.mark.parametrize("name", INDEXES)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_tied_children_rank_in_document_order_on_every_index(name: str, k: int) -> None:
    """Found by the reference: with fetch_k=1 the engine chose which tied child came back
    (FAISS and InMemoryVectorStore chose differently), and the parent followed it."""
    docs = _retriever(INDEXES[name]).invoke("apple", k=k, fetch_k=1)
    assert [d.id for d in docs] == [f"t/parent/{i}" for i in range(k)]
    assert [[m["key"] for m in d.metadata["matches"]] for d in docs] == [
        [f"t/child/{i}"] for i in range(k)
    ]
    assert [(d.metadata["start"], d.metadata["end"]) for d in docs] == [
        (18 * i, 18 * i + 18) for i in range(k)
    ]


# Issue 33, item 1: a group of equal scores wider than the search ----------------------

RIGHTS = "All rights reserved."
"""The sentence 120 documents share."""


def _notices(make: Any, mode: str) -> SmallToBigRetriever:
    """120 documents ``"Note NNN. All rights reserved."`` (``dNNN``), one sentence a leaf.

    Under :class:`ExactWords` every copy of the shared sentence scores the same
    cosine (1 to float32 precision) against it, and every "Note NNN." scores 0.
    """
    retriever = SmallToBigRetriever(
        vectorstore=make(ExactWords()),
        mode=mode,
        hybrid=False,
        child_splitter=lambda text: re.split(r"(?<=\.) ", text),
    )
    retriever.add_documents(
        [Document(page_content=f"Note {i:03d}. {RIGHTS}", metadata={"n": i}) for i in range(120)],
        ids=[f"d{i:03d}" for i in range(120)],
    )
    return retriever


def _whole(mode: str, i: int) -> dict[str, Any]:
    """Document ``i`` whole (30 characters: 8 tokens), its one match its second sentence."""
    leaf = "child" if mode == "parent" else "sentence"
    node = {"parent": f"d{i:03d}/parent/0", "multilevel": f"d{i:03d}/paragraph/0"}
    return {
        "id": node.get(mode),
        "text": f"Note {i:03d}. {RIGHTS}",
        "source_id": f"d{i:03d}",
        "start": 0,
        "end": 30,
        "tokens": 8,
        "matches": [f"d{i:03d}/{leaf}/1"],
    }


def _seen(doc: Document) -> dict[str, Any]:
    meta = doc.metadata
    return {
        "id": doc.id,
        "text": doc.page_content,
        "source_id": meta["source_id"],
        "start": meta["start"],
        "end": meta["end"],
        "tokens": meta["tokens"],
        "matches": [m["key"] for m in meta["matches"]],
    }


@pytest.mark.parametrize("name", INDEXES)
@pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
def test_a_tie_wider_than_the_search_returns_what_fits(name: str, mode: str) -> None:
    """Issue 33, item 1: all 120 copies tie, so the first search (100 deep) left the whole
    group out, had no hit, and stopped: ``k=None, max_tokens=400`` returned ``[]``.

    Worked out by hand. Every copy scores the same, so the scale has no spread:
    each copy's relevance is 0, every one is evidence (cosine above 0), and no
    "Note NNN." is (cosine 0). They rank in document order (d000, d001, ...).
    parent, window, multilevel: each result is one document whole (8 tokens: its
    parent, its window of one sentence either side, its paragraph), so 400 tokens
    hold the first 50. pack: the seeds are the 120 copies, rank r weighing
    1/(r + 1); "Note r." (3 tokens) is worth half of seed r's weight, 1/(2r + 2),
    as much as seed 2r + 1 (5 tokens), which goes first (nearer a seed). So the
    order is seed 2j, seed 2j + 1, "Note j." (13 tokens a round): 30 rounds take
    390 tokens, then seeds 60 and 61 the last 10. Documents 0-29 come back whole,
    30-61 as their copy alone (10:30, 5 tokens): 62 results, 400 tokens.
    parent, window, multilevel (issue 32, evidence before context): the 120 wholes
    (960 tokens) do not fit, so every copy gets its own sentence first, in rank
    order, while it fits: the first 80 (5 tokens each, 400 in all), and no context.
    """
    retriever = _notices(INDEXES[name], mode)
    assert len(retriever.invoke(RIGHTS, k=4)) == 4
    docs = retriever.invoke(RIGHTS, k=None, max_tokens=400)
    if mode == "pack":
        alone = [
            {
                "id": None,
                "text": RIGHTS,
                "source_id": f"d{i:03d}",
                "start": 10,
                "end": 30,
                "tokens": 5,
                "matches": [f"d{i:03d}/sentence/1"],
            }
            for i in range(30, 62)
        ]
        assert [_seen(d) for d in docs] == [_whole(mode, i) for i in range(30)] + alone
        assert [d.metadata["split_ids"] for d in docs] == [[0, 1]] * 30 + [[1]] * 32
        assert [d.metadata["context"] for d in docs] == list(range(62))
    else:
        leaf = "child" if mode == "parent" else "sentence"
        assert [_seen(d) for d in docs] == [
            {
                "id": None,
                "text": RIGHTS,
                "source_id": f"d{i:03d}",
                "start": 10,
                "end": 30,
                "tokens": 5,
                "matches": [f"d{i:03d}/{leaf}/1"],
            }
            for i in range(80)
        ]
        assert {d.metadata["level"] for d in docs} == {leaf}
        assert {d.metadata["escalation"] for d in docs} == {"cut"}
    if mode == "multilevel":
        assert [d.metadata["context"] for d in docs] == list(range(80))
    scores = {d.metadata["score"] for d in docs}
    assert len(scores) == 1  # one tie
    assert scores.pop() == pytest.approx(1.0, rel=1e-6)  # float32's cosine of equal vectors
    assert sum(d.metadata["tokens"] for d in docs) == 400


# The differential tests, with ties wider than the search: >100 equal sentences ------------


@st.composite
def wide_corpus(draw: st.DrawFn) -> list[tuple[str, str, dict[str, Any]]]:
    """1-3 sources whose sentences are mostly one sentence, 101-300 copies in all (wider than
    the first search of a ``k=None`` call, 100 deep), among a few others (sometimes another
    group of 101-150 equal sentences), in paragraphs and sections."""
    rnd = draw(st.randoms(use_true_random=False))
    sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(
        lambda ws: " ".join(ws) + "."
    )
    wide = draw(sentence)
    others = draw(st.lists(sentence, min_size=1, max_size=4))
    n_wide = draw(st.integers(101, 300))
    n_other = draw(st.sampled_from([0, 5, 20, 120]))
    pool = [wide] * n_wide + [others[i % len(others)] for i in range(n_other)]
    rnd.shuffle(pool)
    n_sources = draw(st.integers(1, 3))
    cuts = sorted(rnd.sample(range(1, len(pool)), n_sources - 1))
    out = []
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(pool)], strict=True)):
        sections, paragraphs, sentences = [], [], []
        for text in pool[a:b]:
            sentences.append(text)
            if rnd.random() < 0.2:
                paragraphs.append(" ".join(sentences))
                sentences = []
                if rnd.random() < 0.3:
                    sections.append("\n\n".join(paragraphs))
                    paragraphs = []
        paragraphs += [" ".join(sentences)] if sentences else []
        sections += ["\n\n".join(paragraphs)] if paragraphs else []
        meta: dict[str, Any] = {"topic": draw(st.sampled_from("ab")), "n": draw(st.integers(0, 3))}
        out.append((SOURCE_IDS[i], "\n\n\n\n".join(sections), meta))
    return out


@st.composite
def wide_cases(draw: st.DrawFn, mode: str) -> Case:
    """A wide corpus, queried often by the topic words of its most repeated sentence."""
    docs = draw(wide_corpus())
    counts = Counter(s for _, text, _ in docs for s in re.split(SENTENCE_SEP, text) if s.strip())
    widest = max(counts, key=lambda s: (counts[s], s))
    topics = [w for w in re.findall(r"[^\s.]+", widest) if w in TOPICS]
    query = draw(st.one_of(st.just(" ".join(topics)), queries) if topics else queries)
    return Case(
        mode,
        draw(st.sampled_from(sorted(EMBEDDINGS))),
        docs,
        sentence_callable(),
        draw(st.sampled_from(MODES_INDEXES)),
        draw(st.integers(8, 24)),
        query,
        draw(options()),
        draw(st.one_of(st.just(0), st.integers(0, len(FILTERS) - 1))),
    )


WIDE = settings(max_examples=max(30, settings().max_examples // 5))
"""Each case indexes hundreds of children: a fifth of the other differential tests' examples
(100 under the "ci" profile), at least 30."""


def wide_run(case: Case) -> None:
    """:func:`run`, noting whether a group of equal sentences is wider than the first search."""
    keep = FILTERS[case.filter_no][1]
    counts = Counter(
        s for _, text, meta in case.docs if keep(meta) for s in re.split(SENTENCE_SEP, text)
    )
    o = case.opts
    scaled = o["hybrid"] or case.mode in ("multilevel", "pack") or o["k"] is None
    depth = max(o["fetch_k"], o["k"] or 0, 100 if scaled else 0)
    if max(counts.values(), default=0) > depth:
        event("a group of equal sentences wider than the first search")
    run(case)


@WIDE
@given(case=wide_cases("parent"))
def test_parent_mode_with_wide_ties_equals_the_reference(case: Case) -> None:
    wide_run(case)


@WIDE
@given(case=wide_cases("window"))
def test_window_mode_with_wide_ties_equals_the_reference(case: Case) -> None:
    wide_run(case)


@WIDE
@given(case=wide_cases("multilevel"))
def test_multilevel_mode_with_wide_ties_equals_the_reference(case: Case) -> None:
    wide_run(case)


@WIDE
@given(case=wide_cases("pack"))
def test_pack_mode_with_wide_ties_equals_the_reference(case: Case) -> None:
    wide_run(case)
