"""User-given proxies for the benchmark, made without a model (issue 35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from langchain_s2b.core.proxies import Proxy
from langchain_s2b.evaluation.data import Question, load_questions
from langchain_s2b.evaluation.proxy_sets import (
    _tree,
    first_sentences,
    other_questions,
    split_questions,
)

TEXT = "Alpha one. Alpha two.\n\nBeta only.\n\nGamma one. Gamma two. Gamma three.\n"
# sentences (0,11) (11,23) (23,35) (35,46) (46,57) (57,70); paragraphs (0,23) (23,35) (35,70)
DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "squad2-dev"


def _q(qid: str, doc: str, *evidence: tuple[int, int]) -> Question:
    return Question(qid, f"question {qid}?", ("a",), doc, tuple(evidence))


class TestFirstSentences:
    def test_each_paragraph_of_two_sentences_or_more(self) -> None:
        docs = [Document(page_content=TEXT, id="a"), Document(page_content="One only.\n", id="b")]
        assert first_sentences(docs) == [
            [Proxy("Alpha one.", 0, 23, "summary"), Proxy("Gamma one.", 35, 70, "summary")],
            [],
        ]


class TestOtherQuestions:
    def test_split_alternates_within_each_article(self) -> None:
        qs = [_q("1", "a"), _q("2", "b"), _q("3", "a"), _q("4", "a"), _q("5", "b")]
        evaluated, giving = split_questions(qs)
        assert [q.id for q in evaluated] == ["1", "2", "4"]
        assert [q.id for q in giving] == ["3", "5"]

    def test_a_proxy_points_at_the_sentences_of_its_evidence(self) -> None:
        docs = [Document(page_content=TEXT, id="a"), Document(page_content=TEXT, id="b")]
        giving = [
            _q("1", "a", (40, 44)),  # inside "Gamma one."
            _q("2", "a", (15, 40)),  # "Alpha two." to "Gamma one."
            _q("3", "b", (46, 57), (0, 3), (48, 50)),  # two sentences: two proxies
            _q("4", "c", (0, 3)),  # another article: none here
            _q("5", "a", (22, 23)),  # the last character of a sentence
        ]
        assert other_questions(docs, giving) == [
            [
                Proxy("question 1?", 35, 46, "question"),
                Proxy("question 2?", 11, 46, "question"),
                Proxy("question 5?", 11, 23, "question"),
            ],
            [Proxy("question 3?", 46, 57, "question"), Proxy("question 3?", 0, 11, "question")],
        ]

    def test_an_evaluated_question_is_never_given(self) -> None:
        q = _q("9", "a", (0, 3))
        with pytest.raises(ValueError, match=r"^1 evaluated question\(s\) given as proxies"):
            other_questions([Document(page_content=TEXT, id="a")], [q], [q])

    def test_on_the_dev_set_no_evaluated_question_is_in_the_index(self) -> None:
        questions = load_questions(DATA / "questions.jsonl")
        docs = [
            Document(page_content=row["text"], id=row["id"])
            for row in map(json.loads, (DATA / "documents.jsonl").open())
        ]
        evaluated, giving = split_questions(questions)
        assert len(evaluated) + len(giving) == len(questions)
        proxies = other_questions(docs, giving, evaluated)
        texts = {p.text for mine in proxies for p in mine}
        assert not texts & {q.question for q in evaluated} - {q.question for q in giving}
        expected = set()  # brute force: the sentences holding each span, by a linear scan
        for doc in docs:
            leaves = _tree(doc).leaves
            for q in giving:
                if q.doc_id != doc.id:
                    continue
                for start, end in q.evidence:
                    held = [lf for lf in leaves if lf.start < end and start < lf.end]
                    expected.add((doc.id, q.question, held[0].start, held[-1].end))
        pairs = zip(docs, proxies, strict=True)
        got = {(d.id, p.text, p.start, p.end) for d, mine in pairs for p in mine}
        assert got == expected
        assert sum(map(len, proxies)) == len(expected) == 1063  # of 996 questions
        for doc, mine in zip(docs, proxies, strict=True):
            for proxy in mine:  # every span is a run of whole sentences of its document
                assert 0 <= proxy.start < proxy.end <= len(doc.page_content)
