"""Each mode keeps its shape under a budget, ``k`` counts results, relevance carries across scales.

The findings of the budget's second design (issue 27), each with its exact
answer worked out from how the text is built. The corpus is the issue's: an
exact bag-of-words embedding (:class:`ExactWords`), sentences of 100
characters (25 tokens; a paragraph's last one 26, its blank line included),
paragraphs of ten sentences (251 tokens), sections of a heading and four
paragraphs (~1,000 tokens), documents of four sections (~4,000 tokens). Each
sentence starts with its own marker word, so a query of markers hits exactly
those sentences, all equally (every other sentence scores 0).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.splitters import SentenceSplitter, paragraph_splitter
from langchain_s2b.core.tree import Level

from ._embeddings import ExactWords

FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt"


def marker(tag: str, section: int, paragraph: int, sentence: int) -> str:
    """The first word of a sentence: ``A1203x`` is sentence 3 of paragraph 2 of section 1."""
    return f"{tag.upper()}{section}{paragraph}{sentence:02d}x"


def sentence(word: str) -> str:
    """99 characters: the marker, the filler cut at a word, a full stop."""
    body = f"{word} {FILLER}"[:98].rsplit(" ", 1)[0]
    return (body + " " + "x" * (97 - len(body)) + ".")[:99]


def wordy(word: str) -> str:
    """A sentence like :func:`sentence` with more distinct words (so it scores lower)."""
    body = word + " " + " ".join(f"q{i}" for i in range(20))
    return body + " " + "x" * (97 - len(body)) + "."


def paragraph(tag: str, section: int, number: int) -> str:
    return " ".join(sentence(marker(tag, section, number, i)) for i in range(10))


def document(tag: str, sections: int = 4) -> str:
    """Sections of a Markdown heading and four paragraphs."""
    parts = []
    for s in range(sections):
        paras = "\n\n".join(paragraph(tag, s, p) for p in range(4))
        parts.append(f"## Part {tag}{s}\n\n{paras}")
    return "\n\n".join(parts) + "\n"


def span_of(text: str, first: str, last: str | None = None) -> tuple[int, int]:
    """From the sentence that starts with ``first`` to the end of ``last``'s (its space too)."""
    start = text.index(first)
    end_at = text.index(last or first)
    end = text.index(".", end_at) + 1
    while end < len(text) and text[end] in " \n":
        end += 1
    return start, end


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def leaf_no(text: str, word: str) -> int:
    """The split id of the sentence that starts with ``word`` (headings are leaves too)."""
    before = text[: text.index(word)]
    return before.count(".") + before.count("## Part")


def retriever(mode: str, docs: dict[str, str], **fields: Any) -> SmallToBigRetriever:
    if mode == "parent":  # parents are paragraphs, children sentences
        fields.setdefault(
            "levels", [Level("sentence", SentenceSplitter()), Level("parent", paragraph_splitter())]
        )
    documents = [Document(page_content=text, id=key) for key, text in docs.items()]
    return SmallToBigRetriever.from_documents(documents, ExactWords(4096), mode=mode, **fields)


def spans(docs: list[Document]) -> list[tuple[str, int, int]]:
    return [(d.metadata["source_id"], d.metadata["start"], d.metadata["end"]) for d in docs]


def test_the_sentences_are_the_size_the_tests_assume() -> None:
    text = document("a")
    assert len(sentence(marker("a", 0, 0, 0))) == 99
    first = text.index("A0000x")
    assert text[first : first + 100] == sentence("A0000x") + " "
    assert tokens(paragraph("a", 0, 0) + "\n\n") == 251


MODES = ["parent", "window", "multilevel", "pack"]
FOUR = {tag: document(tag, sections=1) for tag in "abcd"}
ONE_EACH = " ".join(marker(tag, 0, 1, 4) for tag in "abcd")  # one equal hit per document


class TestKCountsResults:
    @pytest.mark.parametrize("mode", MODES)
    def test_k_caps_the_results_under_a_budget(self, mode: str) -> None:
        # four equally strong hits in four documents: k=2 gives the first two, in
        # document order (ties), whatever the budget
        r = retriever(mode, FOUR)
        for budget in (300, 100_000):
            docs = r.invoke(ONE_EACH, k=2, max_tokens=budget)
            assert [d.metadata["source_id"] for d in docs] == ["a", "b"]

    @pytest.mark.parametrize("mode", MODES)
    def test_k_none_gives_as_many_as_fit(self, mode: str) -> None:
        docs = retriever(mode, FOUR).invoke(ONE_EACH, k=None, max_tokens=100_000)
        assert [d.metadata["source_id"] for d in docs] == ["a", "b", "c", "d"]

    def test_k_none_without_a_budget_means_four(self) -> None:
        five = {**FOUR, "e": document("e", sections=1)}
        query = ONE_EACH + " " + marker("e", 0, 1, 4)
        docs = retriever("window", five).invoke(query, k=None)
        assert [d.metadata["source_id"] for d in docs] == ["a", "b", "c", "d"]


ONE = {"a": document("a")}
TEXT = ONE["a"]


class TestParent:
    def test_the_whole_parent_comes_back_when_it_fits(self) -> None:
        query = f"{marker('a', 1, 2, 3)} {marker('a', 1, 2, 5)}"
        (doc,) = retriever("parent", ONE).invoke(query, k=1, max_tokens=1_000)
        start, end = span_of(TEXT, marker("a", 1, 2, 0), marker("a", 1, 2, 9))
        assert doc.page_content == TEXT[start:end]
        meta = doc.metadata
        assert (meta["level"], meta["start"], meta["end"], meta["tokens"]) == (
            "parent",
            start,
            end,
            tokens(TEXT[start:end]),
        )
        assert [m["split_id"] for m in meta["matches"]] == [
            leaf_no(TEXT, marker("a", 1, 2, i)) for i in (3, 5)
        ]
        assert "escalation" not in meta
        assert "cut_from" not in meta

    def test_a_parent_that_does_not_fit_is_cut_around_its_hits(self) -> None:
        # hits 3 and 5 of a paragraph, 75 tokens: from 3, the neighbour worth more is 4
        # (1/2 + 1/2) before 2 (1/2 + 1/8), then 5 (a hit: 1 + 1/4) before 2: sentences 3-5
        query = f"{marker('a', 1, 2, 3)} {marker('a', 1, 2, 5)}"
        (doc,) = retriever("parent", ONE).invoke(query, k=1, max_tokens=75)
        start, end = span_of(TEXT, marker("a", 1, 2, 3), marker("a", 1, 2, 5))
        assert doc.page_content == TEXT[start:end]
        assert tokens(doc.page_content) == 75
        parent = span_of(TEXT, marker("a", 1, 2, 0), marker("a", 1, 2, 9))
        meta = doc.metadata
        assert (meta["level"], meta["escalation"], meta["tokens"]) == ("sentence", "cut", 75)
        assert meta["cut_from"] == {
            "level": "parent",
            "key": "a/parent/8",  # paragraphs: a heading and four a section, the third here
            "start": parent[0],
            "end": parent[1],
        }
        assert len(meta["matches"]) == 2


class TestWindow:
    QUERY = f"{marker('a', 0, 1, 4)} {marker('a', 2, 3, 6)}"

    def expected(self, section: int, para: int, hit: int) -> tuple[str, int, int]:
        start, _ = span_of(TEXT, marker("a", section, para, hit - 1))
        _, end = span_of(TEXT, marker("a", section, para, hit + 1))
        return ("a", start, end)

    def test_every_window_comes_back_whole(self) -> None:
        # window_size=1, two hits, a budget far above them: both windows, three sentences each
        r = retriever("window", ONE)
        docs = r.invoke(self.QUERY, k=None, max_tokens=100_000)
        assert spans(docs) == [self.expected(0, 1, 4), self.expected(2, 3, 6)]
        assert [d.metadata["tokens"] for d in docs] == [75, 75]
        assert [d.metadata["level"] for d in docs] == ["window", "window"]
        assert r.invoke(self.QUERY, k=2, max_tokens=100_000) == r.invoke(self.QUERY, k=2)

    def test_the_best_window_comes_whole_before_the_next_hit(self) -> None:
        # 100 tokens: the first window (75), then the second hit's own sentence (25)
        docs = retriever("window", ONE).invoke(self.QUERY, k=None, max_tokens=100)
        start, end = span_of(TEXT, marker("a", 2, 3, 6))
        assert spans(docs) == [self.expected(0, 1, 4), ("a", start, end)]
        second = docs[1].metadata
        assert (second["level"], second["escalation"], second["split_ids"]) == (
            "sentence",
            "cut",
            [leaf_no(TEXT, marker("a", 2, 3, 6))],
        )
        window = self.expected(2, 3, 6)
        assert second["cut_from"] == {"level": "window", "start": window[1], "end": window[2]}


class TestMultilevel:
    def one(self, query: str, **options: Any) -> Document:
        docs = retriever("multilevel", ONE).invoke(query, k=1, **options)
        assert len(docs) == 1
        return docs[0]

    def test_three_hits_in_one_paragraph_give_the_paragraph(self) -> None:
        query = " ".join(marker("a", 1, 2, i) for i in (2, 5, 7))
        doc = self.one(query, max_tokens=100_000)
        start, end = span_of(TEXT, marker("a", 1, 2, 0), marker("a", 1, 2, 9))
        assert (doc.metadata["level"], doc.metadata["escalation"]) == ("paragraph", "single-parent")
        assert (doc.metadata["start"], doc.metadata["end"]) == (start, end)

    def test_hits_in_two_paragraphs_of_a_section_give_the_section(self) -> None:
        query = f"{marker('a', 2, 0, 5)} {marker('a', 2, 3, 1)}"
        for options in ({"max_tokens": 100_000}, {}):  # the section fits the plain 1,024 too
            doc = self.one(query, **options)
            start, _ = span_of(TEXT, "## Part a2")
            _, end = span_of(TEXT, marker("a", 2, 3, 9))
            assert (doc.metadata["level"], doc.metadata["escalation"]) == (
                "section",
                "spans-parents",
            )
            assert (doc.metadata["start"], doc.metadata["end"]) == (start, end)
            assert doc.metadata["tokens"] == tokens(TEXT[start:end]) <= 1024

    def test_hits_in_two_sections_give_the_document_when_it_fits(self) -> None:
        query = f"{marker('a', 0, 1, 5)} {marker('a', 3, 2, 2)}"
        doc = self.one(query, max_tokens=100_000)
        assert (doc.metadata["level"], doc.metadata["escalation"]) == ("doc", "spans-parents")
        assert doc.page_content == TEXT

    def test_a_cover_that_does_not_fit_splits_into_the_nodes_that_pay(self) -> None:
        # 1,100 tokens: the document does not fit. Evidence first: the three hit sentences
        # (75 tokens). Section 0 (1,004 tokens) holds two hits, but they and their
        # neighbours cover 600 of its 4,016 characters (.15), short of the 94% of the
        # budget it would fill: it does not pay. Its first paragraph does (300 of 1,001
        # characters, .30, against 27% of the budget); then context grows by worth,
        # and each other paragraph grows to its whole (251 tokens each, 753 in all)
        query = " ".join([marker("a", 0, 1, 5), marker("a", 0, 2, 5), marker("a", 3, 2, 2)])
        docs = retriever("multilevel", ONE).invoke(query, k=None, max_tokens=1_100)
        paragraphs = [
            span_of(TEXT, marker("a", s, p, 0), marker("a", s, p, 9))
            for s, p in ((0, 1), (0, 2), (3, 2))
        ]
        assert spans(docs) == [("a", *span) for span in paragraphs]
        assert [d.metadata["tokens"] for d in docs] == [251, 251, 251]
        assert [d.metadata["level"] for d in docs] == ["paragraph"] * 3
        assert [d.metadata["escalation"] for d in docs] == ["single-parent"] * 3
        assert [d.id for d in docs] == ["a/paragraph/2", "a/paragraph/3", "a/paragraph/18"]

    def test_a_run_is_cut_from_its_paragraph_when_the_paragraph_does_not_fit(self) -> None:
        # 150 tokens, three hits: their sentences first (75), then by worth: each hit's
        # next-door sentences (worth 1/2, 1/4, 1/6 of a hit: rank order), while they fit
        query = " ".join([marker("a", 0, 1, 5), marker("a", 0, 2, 5), marker("a", 3, 2, 2)])
        docs = retriever("multilevel", ONE).invoke(query, k=None, max_tokens=150)
        assert sum(d.metadata["tokens"] for d in docs) <= 150
        assert [d.metadata["escalation"] for d in docs] == ["cut"] * 3
        runs = [
            span_of(TEXT, marker("a", 0, 1, 4), marker("a", 0, 1, 6)),
            span_of(TEXT, marker("a", 0, 2, 4), marker("a", 0, 2, 5)),
            span_of(TEXT, marker("a", 3, 2, 2)),
        ]
        assert spans(docs) == [("a", *run) for run in runs]
        paragraph = span_of(TEXT, marker("a", 3, 2, 0), marker("a", 3, 2, 9))
        assert docs[2].metadata["cut_from"] == {
            "level": "paragraph",
            "key": "a/paragraph/18",  # a heading and four paragraphs a section: 3 * 5 + 3
            "start": paragraph[0],
            "end": paragraph[1],
        }

    def test_a_weaker_context_placed_whole_never_crowds_out_the_best_hit(self) -> None:
        # Document a's best hit lies in a 251-token paragraph, which 90 tokens can not hold;
        # document s (a weaker hit: its sentences have more distinct words) is one 75-token
        # paragraph. a waits for a run, holding its hit's 25 tokens (65 left), so s's
        # paragraph no longer fits and waits too (40 left). Then the runs, best first: a's
        # grows from its hit to the sentence before (50 of 65), s keeps its hit (25 of 40).
        # Placing s's paragraph first returned it alone, without the best hit.
        short = " ".join(wordy(marker("s", 0, 0, i)) for i in range(3)) + "\n"
        docs = retriever("multilevel", {"a": TEXT, "s": short}).invoke(
            f"{marker('a', 1, 2, 5)} {marker('s', 0, 0, 1)}", k=2, max_tokens=90
        )
        assert docs[0].metadata["score"] > docs[1].metadata["score"] > 0
        assert spans(docs) == [
            ("a", *span_of(TEXT, marker("a", 1, 2, 4), marker("a", 1, 2, 5))),
            ("s", *span_of(short, marker("s", 0, 0, 1))),
        ]
        assert [d.metadata["tokens"] for d in docs] == [50, 25]
        assert [d.metadata["escalation"] for d in docs] == ["cut", "cut"]


class TestCeiling:
    @given(
        mode=st.sampled_from(["parent", "window"]),
        picks=st.lists(
            st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 9)),
            min_size=1,
            max_size=6,
        ),
        k=st.integers(1, 5),
    )
    def test_a_ceiling_the_answer_does_not_reach_changes_nothing(
        self, mode: str, picks: list[tuple[int, int, int]], k: int
    ) -> None:
        r = CEILING[mode]
        query = " ".join(marker("a", *p) for p in picks)
        assert r.invoke(query, k=k, max_tokens=10**6) == r.invoke(query, k=k)


CEILING = {mode: retriever(mode, ONE) for mode in ("parent", "window")}


class TestEvidenceBeforeContext:
    """Issue 32: each evidence hit gets its own leaf before context grows around any hit."""

    EQUAL = f"{marker('a', 0, 1, 5)} {marker('a', 3, 2, 2)}"  # equal hits, two sections

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_an_equal_hit_is_never_dropped_for_context(self, mode: str) -> None:
        # both hit sentences (25 tokens each) and 5 tokens: no neighbour fits, both hits do
        docs = retriever(mode, ONE).invoke(self.EQUAL, k=None, max_tokens=55)
        hits = [span_of(TEXT, marker("a", 0, 1, 5)), span_of(TEXT, marker("a", 3, 2, 2))]
        assert spans(docs) == [("a", *hit) for hit in hits]
        assert [d.metadata["escalation"] for d in docs] == ["cut", "cut"]
        assert [d.metadata["tokens"] for d in docs] == [25, 25]

    def test_multilevel_grows_context_by_worth_once_both_hits_are_in(self) -> None:
        # 110 tokens: both hits (50), then the better-ranked hit's two neighbours (worth
        # 1/2 each; of equal scores the first in the text ranks first), 10 tokens unspent
        docs = retriever("multilevel", ONE).invoke(self.EQUAL, k=None, max_tokens=110)
        runs = [
            span_of(TEXT, marker("a", 0, 1, 4), marker("a", 0, 1, 6)),
            span_of(TEXT, marker("a", 3, 2, 2)),
        ]
        assert spans(docs) == [("a", *run) for run in runs]
        assert [d.metadata["tokens"] for d in docs] == [75, 25]

    def test_a_paragraph_that_fits_never_crowds_out_an_equal_hit(self) -> None:
        # paragraphs of four sentences (100 tokens): both hits (50) and 60 tokens. Placing
        # the first hit's paragraph whole would leave 10, and lose the second hit
        short = "\n\n".join(
            f"## Part s{s}\n\n"
            + "\n\n".join(
                " ".join(sentence(marker("s", s, p, i)) for i in range(4)) for p in range(3)
            )
            for s in range(2)
        )
        query = f"{marker('s', 0, 1, 1)} {marker('s', 1, 2, 2)}"
        docs = retriever("multilevel", {"s": short}).invoke(query, k=None, max_tokens=110)
        runs = [
            span_of(short, marker("s", 0, 1, 0), marker("s", 0, 1, 2)),
            span_of(short, marker("s", 1, 2, 2)),
        ]
        assert [(d.metadata["start"], d.metadata["end"]) for d in docs] == runs
        assert [d.metadata["escalation"] for d in docs] == ["cut", "cut"]

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_k_still_counts_results(self, mode: str) -> None:
        # k=1: the second hit would start a second result, so it is passed over; the
        # first grows by one neighbour (of two equal ones, the one before)
        docs = retriever(mode, ONE).invoke(self.EQUAL, k=1, max_tokens=55)
        assert spans(docs) == [("a", *span_of(TEXT, marker("a", 0, 1, 4), marker("a", 0, 1, 5)))]


class Affine(Embeddings):
    """Another model's scale: every cosine ``c`` becomes ``(c + 8) / 9``, exactly.

    Unit vectors ``v`` become ``(v, sqrt(8)) / 3``: the same ranking, every score
    crowded into ``[7/9, 1]`` as multilingual-e5-small crowds them, none 0.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner

    @staticmethod
    def _map(vector: list[float]) -> list[float]:
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm / 3 for x in vector] + [math.sqrt(8) / 3]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._map(v) for v in self.inner.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self._map(self.inner.embed_query(text))


class TestRelevanceAcrossScales:
    QUERIES: ClassVar[list[str]] = [
        f"{marker('a', 0, 1, 4)} {marker('a', 2, 3, 6)} lorem",
        f"{marker('a', 1, 2, 3)} {marker('a', 1, 2, 5)} {marker('a', 3, 0, 0)} ipsum ipsum",
        f"{marker('a', 2, 0, 5)} {marker('a', 2, 3, 1)} dolor",
    ]

    @pytest.mark.parametrize("mode", MODES)
    def test_another_scale_gets_the_same_answer(self, mode: str) -> None:
        # the shared filler words give every sentence a score; the markers lift a few
        doc = [Document(page_content=TEXT, id="a")]
        plain = SmallToBigRetriever.from_documents(doc, ExactWords(4096), mode=mode)
        crowded = SmallToBigRetriever.from_documents(doc, Affine(ExactWords(4096)), mode=mode)
        for query in self.QUERIES:
            for options in ({"k": None, "max_tokens": 400}, {"k": None, "max_tokens": 5_000}):
                want = spans(plain.invoke(query, **options))
                assert want
                assert spans(crowded.invoke(query, **options)) == want

    def test_a_budget_may_seed_deeper_than_fetch_k(self) -> None:
        hits = [marker("a", s, 1, 4) for s in range(4)] + [marker("a", s, 3, 6) for s in range(4)]
        docs = retriever("window", ONE).invoke(" ".join(hits), k=None, fetch_k=2, max_tokens=10_000)
        assert len(docs) == 8

    def test_text_that_shares_nothing_with_the_query_never_comes_back(self) -> None:
        two = {"a": TEXT, "z": document("z", sections=1)}
        docs = retriever("window", two).invoke(marker("a", 0, 1, 4), k=None, max_tokens=100_000)
        assert spans(docs) == [
            ("a", span_of(TEXT, marker("a", 0, 1, 3))[0], span_of(TEXT, marker("a", 0, 1, 5))[1])
        ]


class TestOneTreeServesEveryMode:
    """Issue 32: a per-call mode behaves as documented on any retriever, or is refused."""

    QUERY = " ".join(marker("a", 1, 2, i) for i in (2, 5, 7))

    def test_multilevel_per_call_on_a_window_retriever_climbs_the_ladder(self) -> None:
        built_for_window = retriever("window", ONE)
        got = built_for_window.invoke(self.QUERY, k=1, mode="multilevel", max_tokens=100_000)
        want = retriever("multilevel", ONE).invoke(self.QUERY, k=1, max_tokens=100_000)
        assert got == want
        start, end = span_of(TEXT, marker("a", 1, 2, 0), marker("a", 1, 2, 9))
        assert [(d.metadata["level"], d.metadata["start"], d.metadata["end"]) for d in got] == [
            ("paragraph", start, end)
        ]

    def test_a_tree_without_a_level_above_its_leaves_is_refused_in_one_line(self) -> None:
        flat = retriever("window", ONE, levels=[Level("sentence", SentenceSplitter())])
        with pytest.raises(ValueError, match=r"^mode='multilevel' needs a level") as err:
            flat.invoke(self.QUERY, mode="multilevel")
        assert "\n" not in str(err.value)
        with pytest.raises(ValueError, match="needs a level"):
            retriever("multilevel", ONE, levels=[Level("sentence", SentenceSplitter())])

    @pytest.mark.parametrize("options", [{}, {"parent_level": "doc"}])
    def test_parent_mode_on_a_flat_tree_returns_the_document(self, options: Any) -> None:
        # as LangChain's ParentDocumentRetriever without a parent splitter
        flat = retriever("window", ONE, levels=[Level("sentence", SentenceSplitter())])
        docs = flat.invoke(self.QUERY, k=1, mode="parent", **options)
        assert [(d.metadata["level"], d.page_content) for d in docs] == [("doc", TEXT)]
