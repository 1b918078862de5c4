"""A long query is cut to what the embedding model reads, before any work, for both searches.

``Window.prefix`` against a brute-force reference; the work it does on a long
text; the real offline model's own window; and ``s2b query`` and ``s2b serve``'s
search end to end with a recording embedding (the store's ``fake`` model, told
a window of its own).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import serve
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.live import LiveStore
from langchain_s2b.cli.querying import cut_question
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.embeddings import (
    QUERY_TOKENS,
    HashingEmbeddings,
    LocalE5Embeddings,
    Window,
    query_window,
)

NORMANS = (
    "# Normans\n\nThe Normans gave their name to Normandy. Their leader Rollo swore fealty "
    "to King Charles.\n\nNorman mercenaries served in Italy.\n"
)
STEAM = "A steam engine uses steam as its working fluid. James Watt added a separate condenser.\n"


def _reference(text: str, tokens: int, count: Callable[[str], int]) -> str:
    """The longest word prefix that fits, else the longest prefix of characters: by trying all."""
    if count(text) <= tokens:
        return text
    words = [m.end() for m in re.finditer(r"\S+", text) if count(text[: m.end()]) <= tokens]
    if words:
        return text[: max(words)]
    return text[: max((n for n in range(len(text) + 1) if count(text[:n]) <= tokens), default=0)]


def _pieces(overhead: int, size: int) -> Callable[[str], int]:
    """A model's count: ``overhead`` plus each word in pieces of ``size`` characters."""

    def count(text: str) -> int:
        return overhead + sum(math.ceil(len(w) / size) for w in re.findall(r"\S+", text))

    return count


WORDS = st.sampled_from(["a", "bb", "Rollo", "fealty", "condenser", "漢字漢字漢字", "x" * 40])
GAPS = st.sampled_from([" ", "  ", "\n", "\t", " \n\n "])


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(GAPS, WORDS), max_size=80))
    lead = draw(st.sampled_from(["", " ", "\n"]))
    tail = draw(st.sampled_from(["", " ", "\n"]))
    return lead + "".join(gap + word for gap, word in parts).lstrip() + tail


class TestWindowPrefix:
    @given(
        text=texts(),
        tokens=st.integers(1, 40),
        overhead=st.integers(0, 3),
        size=st.integers(1, 4),
    )
    def test_the_longest_word_prefix_that_fits_as_trying_all(
        self, text: str, tokens: int, overhead: int, size: int
    ) -> None:
        count = _pieces(overhead, size)
        window = Window(tokens, count, exact=True, known=True)
        assert window.prefix(text) == _reference(text, tokens, count)

    def test_worked_examples(self) -> None:
        words = Window(5, _pieces(2, 100), exact=True, known=True)  # 3 words fit
        assert words.prefix("one two three four five") == "one two three"
        assert words.prefix("  one two  three\n four") == "  one two  three"
        assert words.prefix("one two three ") == "one two three "  # all of it fits
        cjk = Window(4, _pieces(0, 1), exact=True, known=True)  # one character a token
        assert cjk.prefix("漢字漢字漢字 then") == "漢字漢字"  # the first word alone does not fit
        assert Window(1, _pieces(2, 1), exact=True, known=True).prefix("abc") == ""

    def test_counts_only_prefixes_near_the_answer_of_a_long_text(self) -> None:
        counted: list[int] = []

        def count(text: str) -> int:
            counted.append(len(text))
            return len(text.split()) + 2

        text = " ".join(f"w{i:05d}" for i in range(100_000))  # 700,000 characters
        cut = Window(512, count, exact=True, known=True).prefix(text)
        assert cut == " ".join(f"w{i:05d}" for i in range(510))
        assert max(counted) <= 4 * len(cut)  # never the whole text, nor near it
        assert len(counted) <= 16


class TestQueryWindow:
    def test_a_model_that_says_its_window_and_counts_its_queries(self) -> None:
        class Counts(HashingEmbeddings):
            max_input_tokens = 9

            def count_tokens(self, text: str) -> int:  # passages: not used for a query
                raise AssertionError

            def count_query_tokens(self, text: str) -> int:
                return len(text.split()) + 2

        window = query_window(Counts())
        assert (window.tokens, window.exact, window.known) == (9, True, True)
        assert window.prefix("a b c d e f g h i j") == "a b c d e f g"

    def test_a_model_with_a_passage_count_only(self) -> None:
        class Passages(HashingEmbeddings):
            max_input_tokens = 4

            def count_tokens(self, text: str) -> int:
                return len(text.split())

        assert query_window(Passages()).prefix("a b c d e f") == "a b c d"

    def test_a_window_without_a_count_is_counted_approximately(self) -> None:
        class Limit(HashingEmbeddings):
            max_input_tokens = 3  # 12 characters

        window = query_window(Limit())
        assert (window.tokens, window.exact, window.known) == (3, False, True)
        assert window.prefix("abcd efgh ijkl mnop") == "abcd efgh"

    @pytest.mark.parametrize("limit", [None, 0, -3, True, 2.5, "512"])
    def test_a_model_that_does_not_say_gets_the_documented_default(self, limit: object) -> None:
        model: Embeddings = HashingEmbeddings()
        if limit is not None:
            model.max_input_tokens = limit  # type: ignore[attr-defined]
        window = query_window(model)
        assert (window.tokens, window.count, window.exact, window.known) == (
            QUERY_TOKENS,
            estimate_tokens,
            False,
            False,
        )
        text = "abc " * 10_000  # 40,000 characters
        assert window.prefix(text) == "abc " * 8191 + "abc"  # 32,767 characters: 8,192 tokens


@pytest.mark.model
def test_the_offline_model_reads_512_word_pieces_and_its_cut_is_the_longest_that_fits() -> None:
    model = LocalE5Embeddings()
    sentence = "Their leader Rollo swore fealty to King Charles, and the Normans held Normandy. "
    text = sentence * 200  # about 2,600 word pieces
    cut = query_window(model).prefix(text)
    rest = text[len(cut) :]
    following = len(cut) + re.match(r"\s*\S+", rest).end()  # type: ignore[union-attr]
    assert text.startswith(cut)
    assert not cut[-1].isspace()  # it ends at the end of a word
    assert rest[0].isspace()
    assert model.count_query_tokens(cut) <= 512 < model.count_query_tokens(text[:following])


# s2b query, end to end ------------------------------------------------------------------


class Recording:
    """What the store's model is given as queries (the class is patched: the CLI makes it)."""

    def __init__(self) -> None:
        self.queries: list[str] = []


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Recording:
    """The ``fake`` model told a window of 12 tokens (2 + one a word); its queries recorded."""
    record = Recording()
    plain = HashingEmbeddings.embed_query

    def embed_query(self: HashingEmbeddings, text: str) -> list[float]:
        record.queries.append(text)
        return plain(self, text)

    def count_query_tokens(self: HashingEmbeddings, text: str) -> int:
        return len(text.split()) + 2

    monkeypatch.setattr(HashingEmbeddings, "embed_query", embed_query)
    monkeypatch.setattr(HashingEmbeddings, "max_input_tokens", 12, raising=False)
    monkeypatch.setattr(HashingEmbeddings, "count_query_tokens", count_query_tokens, raising=False)
    return record


@pytest.fixture
def store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "normans.md").write_text(NORMANS)
    (corpus / "steam.txt").write_text(STEAM)
    target = tmp_path / "store"
    assert main(["index", str(corpus), "--store", str(target)]) == 0
    capsys.readouterr()
    return target


def _query(capsys: pytest.CaptureFixture[str], store: Path, question: str) -> tuple[dict, str]:
    capsys.readouterr()
    argv = ["query", question, "--store", str(store), "--json", "-k", "2", "--mode", "window"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_a_long_question_is_answered_as_its_cut_and_the_model_reads_at_most_its_window(
    store: Path, recording: Recording, capsys: pytest.CaptureFixture[str]
) -> None:
    head = "leader Rollo swore fealty to King Charles of the Normans"  # 10 words: 12 tokens
    question = f"{head} {'steam engine condenser Watt fluid ' * 400}"  # 2,010 words
    long, note = _query(capsys, store, question)
    cut, quiet = _query(capsys, store, head)
    assert long["results"] == cut["results"]  # both searches saw the same text: the head
    assert [r["metadata"]["source_id"].rsplit("/", 1)[1] for r in long["results"]] == [
        "normans.md",
        "normans.md",
    ]  # about Rollo, as the head is (the rest of the question is about steam)
    assert "Rollo swore fealty" in long["results"][0]["text"]
    assert (long["query"], long["query_cut"], cut["query_cut"]) == (head, True, False)
    assert recording.queries == [head, head]  # the model was given the cut alone
    assert note == (
        "s2b: note: the query is longer than the embedding model reads: searched its first "
        f"{len(head)} of {len(question):,} characters (12 tokens)\n"
    )
    assert quiet == ""


def test_a_model_without_a_known_window_gets_the_default(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "Rollo fealty " * 4000  # 52,000 characters; 32,768 are read: 8,192 tokens
    searched, note = cut_question(HashingEmbeddings(), question)
    assert searched == "Rollo fealty " * 2520 + "Rollo"  # 32,765 characters; 32,772 with fealty
    assert note == (
        "the query is longer than s2b searches with a model whose input window it does not "
        "know: searched its first "
        f"{len(searched):,} of 52,000 characters (8,192 tokens, counted approximately)"
    )
    long, _ = _query(capsys, store, question)
    assert (long["query"], long["query_cut"]) == (searched, True)


def test_serve_searches_the_cut_and_the_model_reads_at_most_its_window(
    store: Path, recording: Recording
) -> None:
    head = "leader Rollo swore fealty to King Charles of the Normans"  # 10 words: 12 tokens
    question = f"{head} {'steam engine condenser Watt fluid ' * 400}"
    options = {"mode": "window", "k": 2}
    live = LiveStore(store)
    try:
        searched, note, docs = serve.ask(live, question, options)
        assert (searched, docs) == (head, live.search(head, options))
    finally:
        live.close()
    assert note is not None
    assert note.startswith("the query is longer than the embedding model reads: searched its first")
    assert recording.queries == [head]  # once: the second search found its vector kept
