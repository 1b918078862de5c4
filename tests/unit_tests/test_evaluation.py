"""langchain_s2b.evaluation: loading, scoring, budgets, and whole runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.splitters import SentenceSplitter, paragraph_splitter, size_splitter
from langchain_s2b.evaluation import (
    BUDGETS,
    RULES,
    BudgetStats,
    Piece,
    Question,
    Score,
    budget_table,
    cut,
    evaluate,
    fill_budget,
    invoke_with_k,
    load_documents,
    load_questions,
    markdown_table,
    pieces,
    score,
    whitespace_tokens,
)
from langchain_s2b.evaluation.baselines import MemoEmbeddings, chunk_documents, chunk_retriever

from ._embeddings import BagOfWords

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
TEXT = (
    "Rollo was the leader of the Norse. He agreed to swear fealty to King Charles.\n\n"
    "The Normans adopted the Frankish language. Their dialect became Norman French.\n\n"
    "Steam engines use steam. James Watt added a separate condenser. "
    "Trains ran on steam for a century."
)


def _q(answers: tuple[str, ...], evidence: tuple[tuple[int, int], ...], doc: str = "d") -> Question:
    return Question("q", "?", answers, doc, evidence)


def _span(word: str) -> tuple[int, int]:
    start = TEXT.index(word)
    return start, start + len(word)


class TestScore:
    @pytest.mark.parametrize(
        ("parts", "hit", "answer", "recall"),
        [
            ([Piece("Rollo was", "d", 0, 9)], True, True, 1.0),
            ([Piece("llo was", "d", 2, 9)], False, False, 0.6),
            ([Piece("Rol", "d", 0, 3), Piece("lo", "d", 3, 5)], True, False, 1.0),
            ([Piece("Rollo was", "other", 0, 9)], False, True, 0.0),
            ([Piece("rollo appears elsewhere")], True, True, None),
            ([Piece("no answer here")], False, False, None),
            ([], False, False, 0.0),
        ],
        ids=["inside", "partial", "two-pieces", "wrong-doc", "text-only", "text-miss", "empty"],
    )
    def test_table(self, parts: list[Piece], hit: bool, answer: bool, recall: float | None) -> None:
        result = score(_q(("Rollo",), ((0, 5),)), parts)
        assert (result.hit, result.answer) == (hit, answer)
        assert (
            result.recall == pytest.approx(recall) if recall is not None else result.recall is None
        )
        assert result.tokens == sum(estimate_tokens(p.text) for p in parts)

    def test_any_evidence_span_is_a_hit_and_recall_counts_all(self) -> None:
        question = _q(("a", "b"), ((0, 10), (100, 110)))
        result = score(question, [Piece("x" * 10, "d", 100, 110)])
        assert result.hit
        assert result.recall == pytest.approx(0.5)

    def test_overlapping_evidence_is_counted_once(self) -> None:
        question = _q(("a",), ((0, 10), (5, 15)))
        result = score(question, [Piece("x" * 15, "d", 0, 15)])
        assert result.recall == pytest.approx(1.0)

    @pytest.mark.parametrize(
        ("parts", "precision"),
        [
            ([Piece("Rollo", "d", 0, 5)], 1.0),  # all of it is evidence
            ([Piece("Rollo was", "d", 0, 9)], 7 / 9),  # 0-5 and 7-9
            ([Piece("x" * 20, "d", 100, 120)], 0.0),  # nothing of it is evidence
            # another document's text is paid for and is not evidence: 5 of 5 + 10 chars
            ([Piece("Rollo", "d", 0, 5), Piece("y" * 10, "other", 0, 10)], 5 / 15),
            # the same span twice is paid twice: 8 (0-5, 7-10) of 10, twice
            ([Piece("Rollo was ", "d", 0, 10)] * 2, 16 / 20),
            ([Piece("rollo, without a span")], None),
            ([], None),
        ],
        ids=["exact", "part", "none", "other-doc", "twice", "no-span", "empty"],
    )
    def test_precision_is_the_share_of_returned_characters_inside_evidence(
        self, parts: list[Piece], precision: float | None
    ) -> None:
        # evidence: "Rollo" at 0-5 and a second span at 7-12 ("as th" of "Rollo was the")
        result = score(_q(("Rollo",), ((0, 5), (7, 12))), parts)
        if precision is None:
            assert result.precision is None
        else:
            assert result.precision == pytest.approx(precision)


class TestCut:
    def test_cuts_in_rank_order_at_the_budget(self) -> None:
        # 10 chars = 3 tokens, leaving 2: the next piece keeps its longest prefix of 2 tokens
        parts = [Piece("a" * 10, "d", 0, 10), Piece("b" * 10, "d", 50, 60), Piece("c", "d", 0, 1)]
        assert cut(parts, 5) == [parts[0], Piece("b" * 8, "d", 50, 58)]

    def test_a_piece_that_fits_exactly_ends_the_cut_cleanly(self) -> None:
        parts = [Piece("a" * 8, "d", 0, 8), Piece("b", "d", 8, 9)]
        assert cut(parts, 2) == [parts[0]]

    def test_budget_larger_than_everything_keeps_everything(self) -> None:
        parts = [Piece("a" * 10, "d", 0, 10)]
        assert cut(parts, 100) == parts

    def test_text_only_pieces_are_cut_too(self) -> None:
        assert cut([Piece("abcdefgh")], 1) == [Piece("abcd")]

    def test_whitespace_words(self) -> None:
        parts = [Piece("one two  three", "d", 0, 14), Piece("four five", "d", 20, 29)]
        assert whitespace_tokens("  one two\nthree ") == 3
        assert cut(parts, 4, whitespace_tokens) == [parts[0], Piece("four ", "d", 20, 25)]
        assert cut(parts, 2, whitespace_tokens) == [Piece("one two  ", "d", 0, 9)]

    def test_any_token_counter(self) -> None:
        def chars(text: str) -> int:
            return len(text)

        assert cut([Piece("abcdef", "d", 0, 6)], 4, chars) == [Piece("abcd", "d", 0, 4)]


class TestLoading:
    def test_shipped_example_data(self) -> None:
        docs = load_documents(DATA / "articles.jsonl")
        questions = load_questions(DATA / "questions.jsonl")
        texts = {d.id: d.page_content for d in docs}
        assert len(docs) == 4
        assert len(questions) == 288
        for q in questions:
            assert any(texts[q.doc_id][s:e] in q.answers for s, e in q.evidence)

    def test_filter_and_limit(self) -> None:
        some = load_questions(DATA / "questions.jsonl", doc_ids=["sq2-Normans"], limit=5)
        assert len(some) == 5
        assert {q.doc_id for q in some} == {"sq2-Normans"}

    def test_bad_question_row(self, tmp_path: Path) -> None:
        path = tmp_path / "q.jsonl"
        path.write_text(json.dumps({"id": "1", "question": "?"}) + "\n")
        with pytest.raises(ValueError, match=r"q.jsonl: row 1 is not a question row"):
            load_questions(path)

    def test_bad_json(self, tmp_path: Path) -> None:
        path = tmp_path / "d.jsonl"
        path.write_text('{"id": "a", "text": "x"}\n{oops\n')
        with pytest.raises(ValueError, match=r"d.jsonl:2 is not valid JSON"):
            load_documents(path)

    def test_document_without_text(self, tmp_path: Path) -> None:
        path = tmp_path / "d.jsonl"
        path.write_text(json.dumps({"id": "a", "body": "x"}) + "\n")
        with pytest.raises(ValueError, match="needs string 'id' and 'text'"):
            load_documents(path)


def _docs() -> list[Document]:
    return [Document(page_content=TEXT, id="d", metadata={"title": "T"})]


def _questions() -> list[Question]:
    rows = [
        ("Who was the leader of the Norse?", "Rollo"),
        ("What did James Watt add?", "a separate condenser"),
        ("What did the Normans adopt?", "the Frankish language"),
    ]
    return [Question(f"q{i}", q, (a,), "d", (_span(a),)) for i, (q, a) in enumerate(rows)]


def _s2b(mode: str, **fields: object) -> SmallToBigRetriever:
    return SmallToBigRetriever.from_documents(_docs(), BagOfWords(), mode=mode, **fields)


class TestRetrieverPlumbing:
    def test_chunk_documents_have_exact_spans(self) -> None:
        chunks = chunk_documents(_docs(), SentenceSplitter())
        assert len(chunks) == 7
        for chunk in chunks:
            meta = chunk.metadata
            assert TEXT[meta["start"] : meta["end"]] == chunk.page_content
            assert meta["source_id"] == "d"

    def test_chunk_documents_need_an_id(self) -> None:
        with pytest.raises(ValueError, match="needs documents with an id"):
            chunk_documents([Document(page_content="x")], SentenceSplitter())

    def test_invoke_with_k_on_three_kinds_of_retriever(self) -> None:
        bm25 = BM25Retriever.from_documents(chunk_documents(_docs(), SentenceSplitter()))
        plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter(), k=1)
        s2b = _s2b("window", window_size=0, coalesce=False)
        for retriever in (bm25, plain, s2b):
            assert len(invoke_with_k(retriever, "steam", 2)) == 2
            assert len(invoke_with_k(retriever, "steam", 5)) == 5

    def test_options_need_a_retriever_that_takes_them(self) -> None:
        bm25 = BM25Retriever.from_documents(_docs())
        with pytest.raises(ValueError, match="takes no per-call options; got \\['max_tokens'\\]"):
            invoke_with_k(bm25, "steam", 1, max_tokens=10)

    def test_fill_budget_reaches_the_budget_or_runs_out(self) -> None:
        plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter())
        # k = 1, 2, 4: 4 sentences reach 20 tokens (37) and 20 words (22)
        docs = fill_budget(plain, "steam", 20, k=1)
        assert [d.page_content for d in docs] == [
            "Steam engines use steam. ",
            "Trains ran on steam for a century.",
            "Their dialect became Norman French.\n\n",
            "The Normans adopted the Frankish language. ",
        ]
        assert sum(estimate_tokens(d.page_content) for d in docs) == 37
        everything = fill_budget(plain, "steam", 10_000, k=1)
        assert len(everything) == 7

    def test_memo_embeddings_embed_each_text_once(self) -> None:
        inner = BagOfWords()
        memo = MemoEmbeddings(inner)
        first = memo.embed_documents(["a b", "c", "a b"])
        again = memo.embed_documents(["c", "a b"])
        memo.embed_query("q")
        memo.embed_query("q")
        assert again == [first[1], first[0]]
        assert inner.calls == 2


class TestEvaluate:
    def test_sentence_chunks_find_the_answers(self) -> None:
        plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter())
        report = evaluate(plain, _questions(), name="sentences", k=1, budgets=(8, 64))
        assert report.n == 3
        assert report.hit_rate == pytest.approx(1.0)
        assert report.evidence_recall == pytest.approx(1.0)
        assert report.hit_at[64] == pytest.approx(1.0)
        assert [s.tokens for s in report.per_question] == [9, 10, 11]
        assert report.mean_tokens == pytest.approx(10.0)

    def test_hit_at_budget_never_drops_as_the_budget_grows(self) -> None:
        plain = chunk_retriever(_docs(), BagOfWords(), size_splitter(6))
        report = evaluate(plain, _questions(), k=1, budgets=(1, 4, 16, 64, 256))
        rates = [report.hit_at[b] for b in (1, 4, 16, 64, 256)]
        assert rates == sorted(rates)
        assert rates[-1] == pytest.approx(1.0)
        assert rates[0] == pytest.approx(0.0)

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_small_to_big_modes(self, mode: str) -> None:
        fields = {"child_splitter": SentenceSplitter(), "parent_splitter": paragraph_splitter()}
        retriever = _s2b(mode, **(fields if mode == "parent" else {}))
        report = evaluate(retriever, _questions(), name=mode, k=1)
        assert report.hit_rate == pytest.approx(1.0)
        assert report.evidence_recall == pytest.approx(1.0)
        assert set(report.hit_at) == set(BUDGETS)

    def test_window_recall_is_at_least_sentence_recall(self) -> None:
        docs = load_documents(DATA / "articles.jsonl")[:1]
        questions = load_questions(DATA / "questions.jsonl", doc_ids=[str(docs[0].id)], limit=25)
        embedding = MemoEmbeddings(BagOfWords())
        window = SmallToBigRetriever.from_documents(docs, embedding, mode="window", window_size=1)
        sentences = window.vectorstore.as_retriever()
        kw = {"k": 3, "budgets": ()}
        r_window = evaluate(window, questions, **kw)  # type: ignore[arg-type]
        r_sentences = evaluate(sentences, questions, **kw)  # type: ignore[arg-type]
        assert r_sentences.evidence_recall is not None
        assert r_window.evidence_recall is not None
        assert r_window.evidence_recall >= r_sentences.evidence_recall
        assert r_window.mean_tokens > r_sentences.mean_tokens

    def test_budget_option_lets_the_retriever_fit_the_budget(self) -> None:
        retriever = _s2b("window", window_size=2)
        budgets = (16, 32)
        seen: list[int] = []
        original = retriever.invoke

        def spy(query: str, **kwargs: object) -> list[Document]:
            docs = original(query, **kwargs)  # type: ignore[arg-type]
            if "max_tokens" in kwargs:
                seen.append(int(kwargs["max_tokens"]))  # type: ignore[call-overload]
                total = sum(estimate_tokens(d.page_content) for d in docs)
                assert total <= int(kwargs["max_tokens"])  # type: ignore[call-overload]
            return docs

        object.__setattr__(retriever, "invoke", spy)
        report = evaluate(retriever, _questions(), k=1, budgets=budgets, budget_option="max_tokens")
        assert set(seen) == set(budgets)
        assert report.hit_at == {16: pytest.approx(1.0), 32: pytest.approx(1.0)}

    def test_every_rule_judges_every_row(self) -> None:
        # one ~70-token chunk holds all three answers; at 8 tokens it is cut, not dropped
        plain = chunk_retriever(_docs(), BagOfWords(), size_splitter(1000))
        report = evaluate(plain, _questions(), k=1, budgets=(8, 64))
        assert set(report.hit_by_rule) == set(RULES)
        # 8 tokens = 32 chars: "Rollo" (evidence at 0) is inside the cut, the others are not
        assert report.hit_by_rule["cut-tokens"] == {8: pytest.approx(1 / 3), 64: 1.0}
        # 8 words reach "...to swear": again only Rollo
        assert report.hit_by_rule["cut-words"] == {8: pytest.approx(1 / 3), 64: 1.0}
        # a plain vector-store retriever can not be told a budget: told is its cut
        assert report.hit_by_rule["told"] == report.hit_by_rule["cut-tokens"]
        assert report.hit_at == report.hit_by_rule["cut-tokens"]

    def test_unknown_rule_is_named(self) -> None:
        with pytest.raises(ValueError, match=r"Unknown evaluation rule\(s\) \['drop'\]"):
            evaluate(_s2b("window"), _questions(), rules=("drop",))

    def test_no_questions_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="at least one question"):
            evaluate(_s2b("window"), [])


def test_markdown_table() -> None:
    plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter())
    bm25 = BM25Retriever.from_documents([Document(page_content=TEXT)])
    reports = [
        evaluate(plain, _questions(), name="sentences", k=1, budgets=(8, 64)),
        evaluate(bm25, _questions(), name="bm25 text only", k=1, budgets=(8, 64)),
    ]
    lines = markdown_table(reports).splitlines()
    assert lines[0] == (
        "| retriever | k | tokens | hit % | answer % | evidence recall % "
        "| evidence precision % | hit@8 % | hit@64 % |"
    )
    assert lines[2].startswith("| sentences | 1 | ")
    assert lines[2].split(" | ")[3:6] == ["100.0", "100.0", "100.0"]
    assert lines[3].split(" | ")[5] == "n/a"
    assert len(lines) == 4


def test_budget_table() -> None:
    plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter())
    # 4 words of each best sentence: "Rollo was the leader" holds its answer, the others
    # ("James Watt added a", "The Normans adopted the") stop short of theirs
    report = evaluate(plain, _questions(), name="sentences", k=1, budgets=(4, 64))
    assert budget_table([report], "cut-words").splitlines() == [
        "| retriever (cut-words) | 4 | 64 |",
        "|---|---:|---:|",
        "| sentences | 0.333 | 1.000 |",
    ]


def test_budget_stats_report_what_the_caller_pays() -> None:
    scores = [
        Score(True, True, 1.0, 10, 0.5),
        Score(False, False, 0.0, 30, 0.0),
        Score(False, False, 0.0, 0, None),  # nothing returned: no precision to average
    ]
    assert BudgetStats.of(scores) == BudgetStats(
        hit=pytest.approx(1 / 3), recall=pytest.approx(1 / 3), precision=0.25, tokens=40 / 3
    )


def test_every_budget_reports_tokens_recall_and_precision() -> None:
    plain = chunk_retriever(_docs(), BagOfWords(), SentenceSplitter())
    report = evaluate(plain, _questions(), name="sentences", k=1, budgets=(4, 64))
    # 4 tokens of each best sentence (16 chars): "Rollo was the le" holds "Rollo"; the
    # other two cut before their answers. Tokens: 4 each
    stats = report.by_rule["cut-tokens"][4]
    assert stats.hit == pytest.approx(1 / 3)
    assert stats.tokens == 4.0
    assert stats.precision == pytest.approx((5 / 16) / 3)
    assert report.tokens_at == {4: 4.0, 64: 64.0}  # every sentence, the last one cut
    assert budget_table([report], "cut-tokens", "tokens").splitlines() == [
        "| retriever (cut-tokens, tokens) | 4 | 64 |",
        "|---|---:|---:|",
        "| sentences | 4 | 64 |",
    ]
    assert budget_table([report], "cut-tokens", "precision").splitlines()[2] == (
        "| sentences | 0.104 | 0.062 |"
    )
    with pytest.raises(ValueError, match=r"Unknown metric 'speed'; allowed: \['hit', "):
        budget_table([report], "told", "speed")


def test_pieces_read_spans_from_metadata() -> None:
    docs = [
        Document(page_content="abc", metadata={"source_id": "d", "start": 3, "end": 6}),
        Document(page_content="xyz", metadata={"doc": "e", "start": 0, "end": 3}),
        Document(page_content="no span", metadata={"source_id": "d"}),
    ]
    assert pieces(docs) == [Piece("abc", "d", 3, 6), Piece("xyz"), Piece("no span")]
    assert pieces(docs, doc_id_key="doc")[1] == Piece("xyz", "e", 0, 3)


def test_header_rows_are_one_configuration_with_headers_off_and_on() -> None:
    from langchain_s2b.evaluation import header_rows

    docs = [
        Document(page_content="# Zanzibar\n\nRollo led them.", id="a"),
        Document(page_content="# Mombasa\n\nRollo sailed on.", id="b"),
    ]
    rows = header_rows(
        docs, MemoEmbeddings(BagOfWords()), "window", mode="window", k=1, window_size=0
    )
    assert list(rows) == ["window", "window, headers"]
    off, on = rows["window"], rows["window, headers"]
    assert isinstance(off, SmallToBigRetriever)
    assert isinstance(on, SmallToBigRetriever)
    assert (off.contextual_headers, on.contextual_headers) == (False, True)
    (plain,) = off.invoke("zanzibar rollo led")
    (headed,) = on.invoke("zanzibar rollo led")
    assert "heading" not in plain.metadata
    assert headed.metadata["heading"] == "Zanzibar"
    assert headed.page_content == "Rollo led them."  # the header is searched, never returned
    report = evaluate(on, [Question("q", "zanzibar rollo led", ("Rollo",), "a", ((12, 17),))], k=1)
    assert report.hit_rate == 1.0
