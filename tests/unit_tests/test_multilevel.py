"""Multilevel mode on a hand-built three-section document."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import MULTILEVEL_BUDGET, estimate_tokens
from langchain_s2b.core.hits import Hit
from langchain_s2b.core.multilevel import common_level, ratio_level
from langchain_s2b.core.relevance import evidence

from ._embeddings import BagOfWords

FILLER = "Plain words fill this line. Nothing special happens here. More calm text follows."
TEXT = f"""# Alpha

Zebra giraffe lion. Zebra giraffe tiger. {FILLER}

{FILLER} {FILLER}

# Beta

{FILLER}

Penguin giraffe walrus. {FILLER}

# Gamma

{FILLER} Zebra crossing on the road here. {FILLER}
"""


def _retriever(**fields: Any) -> SmallToBigRetriever:
    # one short document of 28 sentences, most sharing no word with a query: a margin of one
    # standard deviation keeps the two best hits apart from the weak ones (see below)
    fields.setdefault("margin", 1.0)
    fields.setdefault("contextual_headers", False)  # the scores below are the sentences' own
    doc = Document(page_content=TEXT, id="zoo")
    return SmallToBigRetriever.from_documents([doc], BagOfWords(), mode="multilevel", **fields)


def _para_span(needle: str) -> tuple[int, int]:
    at = TEXT.index(needle)
    start = TEXT.rfind("\n\n", 0, at) + 2
    end = TEXT.find("\n\n", at)
    return start, end


class TestEscalation:
    def test_two_hits_in_one_paragraph_return_that_paragraph(self) -> None:
        docs = _retriever(k=1).invoke("zebra giraffe")
        assert len(docs) == 1
        meta = docs[0].metadata
        assert meta["level"] == "paragraph"
        assert meta["escalation"] == "single-parent"
        start, end = _para_span("Zebra giraffe lion.")
        # The paragraph node runs on to the next paragraph's start (its blank line).
        assert (meta["start"], meta["end"]) == (start, end + 2) == (9, 133)
        assert len(meta["matches"]) == 2
        assert TEXT[meta["start"] : meta["end"]] == docs[0].page_content

    def test_hits_in_two_sections_return_the_document(self) -> None:
        docs = _retriever(k=1, margin=0.2).invoke("zebra lion penguin walrus")
        meta = docs[0].metadata
        assert meta["level"] == "doc"
        assert meta["escalation"] == "spans-parents"
        assert docs[0].page_content == TEXT

    def test_weak_stray_hit_does_not_escalate(self) -> None:
        # relevance (hybrid, z-scores of the query's scores): the two "zebra giraffe"
        # sentences 3.12, "Penguin giraffe walrus" 1.06 (Beta), "Zebra crossing" 0.60 (Gamma)
        # the escalation is decided by the confident evidence (``confidence``, on the
        # cosine's scale), not by the broad evidence (``margin``)
        for margin in (1.0, 3.0):
            narrow = _retriever(k=1, margin=margin).invoke("zebra giraffe")
            assert narrow[0].metadata["level"] == "paragraph"
        wide = _retriever(k=1, margin=3.0, confidence=3.0).invoke("zebra giraffe")
        assert wide[0].metadata["level"] == "doc"

    def test_ratio_rule_is_an_option(self) -> None:
        docs = _retriever(k=1, merge_threshold=0.1).invoke("zebra giraffe")
        assert docs[0].metadata["escalation"] == "ratio"
        assert docs[0].metadata["level"] == "doc"
        assert docs[0].page_content == TEXT

    def test_one_context_per_document(self) -> None:
        # relevance: "g"'s two sentences 2.82, "zoo"'s three giraffe sentences 1.77
        retriever = _retriever(k=2, margin=1.5)
        retriever.add_documents([Document(page_content="Giraffe facts. Giraffe necks.", id="g")])
        docs = retriever.invoke("giraffe")
        got = [(d.metadata["source_id"], d.metadata["context"], d.metadata["level"]) for d in docs]
        # "g": two giraffe sentences in one paragraph; "zoo": giraffe in two sections.
        assert got == [("g", 0, "paragraph"), ("zoo", 1, "doc")]
        assert docs[0].metadata["score"] > docs[1].metadata["score"]

    def test_per_call_override_and_async(self) -> None:
        retriever = _retriever(k=1)
        sync = retriever.invoke("penguin walrus", margin=0.0)
        assert sync[0].metadata["level"] == "paragraph"

    async def test_async_matches_sync(self) -> None:
        retriever = _retriever(k=1, margin=0.2)
        query = "zebra lion penguin walrus"
        assert [d.page_content for d in await retriever.ainvoke(query)] == [
            d.page_content for d in retriever.invoke(query)
        ]


class TestBudget:
    """Told a budget, multilevel places the smallest nodes that cover the evidence, then cuts."""

    QUERY = "zebra lion penguin walrus"
    # dense hits: sentence 1 "Zebra giraffe lion. " (5 tokens) and 16 "Penguin giraffe
    # walrus. " (6) tie at .577 (document order: 1 first), then 2 "Zebra giraffe tiger. " (6);
    # the two are the evidence (z 3.29; sentence 2: 1.46), in sections Alpha and Beta

    def test_a_tiny_budget_returns_a_run_cut_from_the_best_hits_paragraph(self) -> None:
        # the document, each section's paragraph: none fits 5 tokens; the first cut is
        # sentence 1 alone, which fits exactly, and k=1 ends the call
        (doc,) = _retriever(k=1).invoke(self.QUERY, max_tokens=5, hybrid=False)
        assert doc.page_content == TEXT[9:29] == "Zebra giraffe lion. "
        meta = doc.metadata
        assert (meta["start"], meta["end"], meta["split_ids"], meta["tokens"]) == (9, 29, [1], 5)
        assert (meta["level"], meta["escalation"]) == ("sentence", "cut")
        start, end = _para_span("Zebra giraffe lion.")
        assert meta["cut_from"] == {
            "level": "paragraph",
            "key": "zoo/paragraph/1",
            "start": start,
            "end": end + 2,
        }
        assert [m["split_id"] for m in meta["matches"]] == [1]

    def test_each_cut_grows_towards_what_is_worth_more(self) -> None:
        # 12 tokens, one result: from sentence 1 (5), sentence 2 (6) is nearer the other
        # hit than the heading before it (1/2 + 1/2**14 against 1/2 + 1/2**16): 11 tokens
        docs = _retriever(k=1).invoke(self.QUERY, max_tokens=12, hybrid=False)
        assert [(d.page_content, d.metadata["split_ids"]) for d in docs] == [
            ("Zebra giraffe lion. Zebra giraffe tiger. ", [1, 2]),
        ]

    def test_hybrid_ranks_the_rare_words_first(self) -> None:
        # BM25 weighs "penguin" and "walrus" (one sentence each) above "zebra" (three):
        # the walrus sentence becomes the best hit; told 12 tokens with k=1 it is cut
        # first (its next sentence, 7 tokens, does not fit); with k=None the lion
        # sentence (5) fits what is left too, and they come in reading order
        assert [d.page_content for d in _retriever(k=1).invoke(self.QUERY, max_tokens=12)] == [
            "Penguin giraffe walrus. "
        ]
        docs = _retriever(k=None).invoke(self.QUERY, max_tokens=12)
        assert [d.page_content for d in docs] == [
            "Zebra giraffe lion. ",
            "Penguin giraffe walrus. ",
        ]
        assert sum(d.metadata["tokens"] for d in docs) == 11

    def test_a_cover_over_the_default_budget_splits_into_what_fits(self) -> None:
        long_filler = "\n\n".join([FILLER] * 30)  # ~620 tokens per section
        text = (
            f"# Alpha\n\nZebra giraffe lion.\n\n{long_filler}\n\n"
            f"# Beta\n\nPenguin giraffe walrus.\n\n{long_filler}\n"
        )
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=text, id="zoo")], BagOfWords(), mode="multilevel", k=2
        )
        assert estimate_tokens(text) > MULTILEVEL_BUDGET
        # the evidence (two sections) escalates to the whole document, over the default
        # budget: each section's evidence gets its smallest node, its paragraph, whole
        docs = retriever.invoke(self.QUERY)
        assert [d.page_content for d in docs] == [
            "Zebra giraffe lion.\n\n",
            "Penguin giraffe walrus.\n\n",
        ]
        assert [(d.metadata["escalation"], d.metadata["context"]) for d in docs] == [
            ("single-parent", 0),
            ("single-parent", 0),
        ]
        for doc in docs:
            assert text[doc.metadata["start"] : doc.metadata["end"]] == doc.page_content
        assert retriever.invoke(self.QUERY, k=1) == docs[:1]


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        self.events.append((name, data))


def test_resolution_reaches_the_callbacks() -> None:
    recorder = Recorder()
    _retriever(k=1).invoke("zebra giraffe", config={"callbacks": [recorder]})
    ((name, data),) = recorder.events
    assert name == "langchain_s2b.resolution"
    result = data["results"][0]
    assert result["level"] == "paragraph"
    assert result["escalation"] == "single-parent"
    assert len(result["matches"]) == 2


def _hit(key: str, score: float, ancestors: list[tuple[str, int, int, int]]) -> Hit:
    return Hit(
        key, "s", "s", "sentence", int(key[-1]), 0, 1, score, "t", ancestors[0][0], tuple(ancestors)
    )


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ([["p0", "s0", "d"], ["p0", "s0", "d"]], 0),
        ([["p0", "s0", "d"], ["p1", "s0", "d"]], 1),
        ([["p0", "s0", "d"], ["p3", "s1", "d"]], 2),
    ],
)
def test_common_level(paths: list[list[str]], expected: int) -> None:
    hits = [_hit(f"h{i}", 1.0, [(k, 0, 1, 2) for k in path]) for i, path in enumerate(paths)]
    assert common_level(hits) == expected


def test_evidence_margin_and_ratio() -> None:
    anc = [("p0", 0, 1, 4), ("s0", 0, 1, 4), ("d", 0, 1, 6)]
    hits = [_hit("h0", 0.9, anc), _hit("h1", 0.85, anc), _hit("h2", 0.5, anc)]
    ev = evidence(hits, {"h0": 2.0, "h1": 1.5, "h2": 0.2}, 1.0)
    assert [h.key for h in ev] == ["h0", "h1"]
    assert ratio_level(ev, 0.4) == 0  # 2 of p0's 4 children hit; 1 of s0's 4 paragraphs
    assert ratio_level(ev, 0.5) == -1
    assert ratio_level(ev, 0.2) == 1


def test_the_default_budget_reuses_the_query_vector() -> None:
    """Contexts over the default budget are refilled without embedding the query again."""

    class Counting(DeterministicFakeEmbedding):
        calls: int = 0

        def embed_query(self, text: str) -> list[float]:
            object.__setattr__(self, "calls", self.calls + 1)
            return super().embed_query(text)

    sentences = " ".join(f"Sentence {i} about wombats and more words here." for i in range(40))
    text = "\n\n".join(f"# S{j}\n\n{sentences}" for j in range(6))
    embedding = Counting(size=16)
    retriever = SmallToBigRetriever.from_documents(
        [Document(text, id="d")], embedding, mode="multilevel", k=3
    )
    embedding.calls = 0
    docs = retriever.invoke("wombats")
    assert embedding.calls == 1
    # a plain call is the 1,024-token ceiling over the ladder
    assert docs == retriever.invoke("wombats", max_tokens=MULTILEVEL_BUDGET)
    assert sum(d.metadata["tokens"] for d in docs) <= MULTILEVEL_BUDGET
