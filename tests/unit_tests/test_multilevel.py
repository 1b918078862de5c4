"""Multilevel mode on a hand-built three-section document."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.hits import Hit
from langchain_s2b.core.multilevel import common_level, evidence, ratio_level

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

    def test_budget_steps_down_keeping_both_hits(self) -> None:
        budget = estimate_tokens(TEXT) - 20
        docs = _retriever(k=1, margin=0.2).invoke("zebra lion penguin walrus", max_tokens=budget)
        # The document (176 tokens) does not fit 156; the two sections holding the hits do,
        # and being adjacent they come back as one result.
        (doc,) = docs
        meta = doc.metadata
        assert (meta["start"], meta["end"]) == (0, TEXT.index("# Gamma")) == (0, 496)
        assert doc.page_content == TEXT[:496]
        assert estimate_tokens(doc.page_content) == 124
        assert (meta["level"], meta["escalation"]) == ("section", "budget-trimmed")
        assert meta["keys"] == ["zoo/section/0", "zoo/section/1"]
        assert [m["split_id"] for m in meta["matches"]] == [1, 16]

    def test_tiny_budget_clips_around_best_hit(self) -> None:
        (doc,) = _retriever(k=1).invoke("zebra giraffe lion", max_tokens=12)
        assert (doc.metadata["start"], doc.metadata["end"]) == (9, 57)  # 48 chars = 12 tokens
        assert doc.page_content == TEXT[9:57]
        assert doc.page_content.startswith("Zebra giraffe lion.")
        assert [m["split_id"] for m in doc.metadata["matches"]] == [1]
        assert doc.metadata["escalation"] == "budget-trimmed"

    def test_weak_stray_hit_does_not_escalate(self) -> None:
        narrow = _retriever(k=1, margin=0.1).invoke("zebra giraffe")
        assert narrow[0].metadata["level"] == "paragraph"
        wide = _retriever(k=1, margin=0.9).invoke("zebra giraffe")
        assert wide[0].metadata["level"] == "doc"

    def test_ratio_rule_is_an_option(self) -> None:
        docs = _retriever(k=1, merge_threshold=0.1).invoke("zebra giraffe")
        assert docs[0].metadata["escalation"] == "ratio"
        assert docs[0].metadata["level"] == "doc"
        assert docs[0].page_content == TEXT

    def test_one_context_per_document(self) -> None:
        retriever = _retriever(k=2)
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


class TestBudgetLadder:
    """C11: the ladder goes down to clips before it drops a hit."""

    FILL = " ".join(f"Plain line number {i} says nothing." for i in range(12))
    A = f"Zebra stripes are bold. {FILL} {FILL}"[:840]  # 210 tokens each
    B = f"{FILL} Walrus tusks are long. {FILL}"[:840]
    TEXT = f"# Alpha\n\n{A}\n\n# Beta\n\n{B}\n"

    def test_two_paragraphs_just_over_the_budget_come_back_as_two_clips(self) -> None:
        """Before: the two paragraphs (420 tokens) did not fit in 400, so only the first came."""
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=self.TEXT, id="t")], BagOfWords(), mode="multilevel"
        )
        docs = retriever.invoke("zebra walrus", k=1, margin=0.5, max_tokens=400)
        # Each paragraph gets half the budget (200 tokens = 800 chars), centred on its hit:
        # the zebra hit opens its paragraph (at 9); the walrus hit (1269, 23 chars) sits
        # (800 - 23) // 2 = 388 chars after the clip's start.
        assert [(d.metadata["start"], d.metadata["end"]) for d in docs] == [(9, 809), (881, 1681)]
        assert [[m["key"] for m in d.metadata["matches"]] for d in docs] == [
            ["t/sentence/1"],
            ["t/sentence/39"],
        ]
        assert [d.page_content for d in docs] == [self.TEXT[9:809], self.TEXT[881:1681]]
        assert [d.metadata["escalation"] for d in docs] == ["budget-trimmed"] * 2
        assert [d.metadata["truncated"] for d in docs] == [True, True]
        assert self.TEXT.index("Walrus") == 1269

    def test_a_paragraph_that_fits_its_share_stays_whole(self) -> None:
        short = "Walrus tusks are long."
        text = f"# Alpha\n\n{self.A}\n\n# Beta\n\n{short}\n"
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=text, id="t")], BagOfWords(), mode="multilevel"
        )
        docs = retriever.invoke("zebra walrus", k=1, margin=0.5, max_tokens=200)
        # The short paragraph costs 6 tokens and stays whole; the other gets the 194 left.
        b_start = text.index(short)
        assert [(d.metadata["start"], d.metadata["end"]) for d in docs] == [
            (9, 9 + 194 * 4),
            (b_start, b_start + len(short) + 1),
        ]
        assert "truncated" not in docs[1].metadata

    def test_a_clip_too_small_for_its_hit_gives_its_share_back(self) -> None:
        """Before, every clip was sized for the best hit overall (at most 3 clips), so the
        walrus paragraph's clip could not hold its own hit and came back empty: a 100-token
        budget gave a 33-token clip of the zebra paragraph and a heading."""
        walrus = "Walrus " + " ".join(f"word{i}" for i in range(40)) + "."  # 68 tokens
        a = f"Zebra zebra stripes. {self.FILL}"
        b = f"{self.FILL[:200]} {walrus} {self.FILL[:200]}"
        text = f"# Alpha\n\n{a}\n\n# Beta\n\n{b}\n"
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=text, id="t")], BagOfWords(), mode="multilevel"
        )
        docs = retriever.invoke("zebra walrus", k=1, margin=1.0, max_tokens=100)
        # Two clips would get 50 tokens each, too few for the walrus sentence: that weaker
        # paragraph is dropped and the zebra paragraph gets the whole budget (400 chars).
        (doc,) = docs
        start = text.index("Zebra zebra")
        assert (doc.metadata["start"], doc.metadata["end"]) == (start, start + 400)
        assert [m["split_id"] for m in doc.metadata["matches"]] == [1]


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
    ev = evidence(hits, 0.1)
    assert [h.key for h in ev] == ["h0", "h1"]
    assert ratio_level(ev, 0.4) == 0  # 2 of p0's 4 children hit; 1 of s0's 4 paragraphs
    assert ratio_level(ev, 0.5) == -1
    assert ratio_level(ev, 0.2) == 1
