"""Model-written proxies (issue 35): pieces, prompts, cache keys, parsing, writer, hook."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.stores import InMemoryByteStore
from pydantic import PrivateAttr

from langchain_s2b.core import propose
from langchain_s2b.core.model_proxies import WrittenProxies, written_proxies
from langchain_s2b.core.propose import (
    PROMPT_VERSIONS,
    PROMPTS,
    ProxyPiece,
    cache_key,
    parse,
    pieces,
    tidy,
)
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.requests import Request, WriteProxies
from langchain_s2b.core.situate import DOCUMENT_CHARS, text_digest
from langchain_s2b.core.splitters import default_levels
from langchain_s2b.core.tree import Tree, build_tree
from langchain_s2b.store.nodes.situator import BATCH, ContextFailedError, proxy_writer
from langchain_s2b.store.runner import adrive, drive

TEXT = """# Normans

The Normans lived in Normandy. Rollo was their leader.

## Norman conquest

William crossed the sea in 1066.

### Aftermath

It was founded in 1066 by the duke. The town grew.
"""
SENTENCES = [(0, 11), (11, 42), (42, 67), (67, 87), (87, 121), (121, 136), (136, 172), (172, 187)]
PARAGRAPHS = [(0, 11), (11, 67), (67, 87), (87, 121), (121, 136), (136, 187)]
SECTIONS = [(0, 67), (67, 121), (121, 187)]
PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.DOTALL)
INSTRUCTIONS = (
    "Decompose the passage into clear and simple propositions, ensuring they are "
    "interpretable out of context.\n"
    "1. Split compound sentences into simple sentences. Maintain the original phrasing "
    "from the input whenever possible.\n"
    "2. For any named entity that is accompanied by additional descriptive information, "
    "separate this information into its own distinct proposition.\n"
    "3. Decontextualize each proposition by adding necessary modifiers to nouns or entire "
    'sentences and replacing pronouns (e.g., "it", "he", "she", "they", "this", "that") '
    "with the full name of the entities they refer to.\n"
    "4. Write one proposition per line, starting with the numbers of the sentences it "
    "comes from in brackets, for example: [1,2] The Eiffel Tower is in Paris.\n"
    "Answer only with the propositions and nothing else."
)


def _tree(text: str = TEXT, mode: str = "window", key: str = "n") -> Tree:
    return build_tree(text, key, default_levels(mode, None, None))


def _passage(prompt: str) -> str:
    found = PASSAGE.search(prompt)
    assert found is not None, prompt
    return found.group(1)


class Proposing(BaseChatModel):
    """Answers a proxy prompt from its passage; counts prompts and ``batch`` calls.

    Propositions: ``[i] P: <sentence i's first two words>`` per numbered sentence,
    then ``[0,99] bad`` (numbers outside the piece) and an empty line. Questions:
    ``1. What about <first word>?`` and ``- Why <first word>?``. Summaries: ``S: <first
    three words>``. ``fail_on``: a passage holding this text raises.
    """

    fail_on: str | None = None
    _calls: list[str] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "proposing-fake"

    @property
    def calls(self) -> int:
        return len(self._calls)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].content)
        passage = _passage(prompt)
        with self._lock:
            self._calls.append(prompt)
        if self.fail_on is not None and self.fail_on in passage:
            msg = f"the provider refused {passage[:20]!r}"
            raise RuntimeError(msg)
        if "Decompose the passage" in prompt:
            lines = []
            for line in passage.splitlines():
                number, _, sentence = line.partition("] ")
                lines.append(f"{number}] P: {' '.join(sentence.split()[:2])}")
            answer = "\n".join([*lines, "[0,99] bad", "", "  "])
        elif "questions that the passage answers" in prompt:
            first = passage.split()[0]
            answer = f"1. What about {first}?\n\n- Why {first}?"
        else:
            answer = "S: " + " ".join(passage.split()[:3])
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])


def _digest_key(kind: str, model: str, document: str, piece: str, window: str = "") -> str:
    """The cache key worked out from its definition (the reference for :func:`cache_key`)."""
    parts = [PROMPT_VERSIONS[kind], model, hashlib.sha256(document.encode()).hexdigest()]
    if window:
        parts.append(window)
    raw = b"".join(p.encode() + b"\x00" for p in parts) + piece.encode()
    return "s2b-proxy/" + hashlib.sha256(raw).hexdigest()


class TestPieces:
    def test_propositions_and_questions_ask_per_paragraph(self) -> None:
        for kind in ("propositions", "questions"):
            found = pieces("n", TEXT, _tree(), kind, "M")
            assert [(p.start, p.end) for p in found] == PARAGRAPHS
            assert [p.sentences for p in found] == [
                ((0, 11),),
                ((11, 42), (42, 67)),
                ((67, 87),),
                ((87, 121),),
                ((121, 136),),
                ((136, 172), (172, 187)),
            ]

    def test_summaries_ask_per_section(self) -> None:
        found = pieces("n", TEXT, _tree(), "summaries", "M")
        assert [(p.start, p.end) for p in found] == SECTIONS
        assert [p.sentences for p in found] == [
            tuple(SENTENCES[0:3]),
            tuple(SENTENCES[3:5]),
            tuple(SENTENCES[5:8]),
        ]

    def test_a_shallower_tree_summarizes_the_document(self) -> None:
        tree = _tree(mode="parent")
        found = pieces("n", TEXT, tree, "summaries", "M")
        assert [(p.start, p.end) for p in found] == [(0, 187)]
        assert found[0].sentences == ((0, 67), (67, 121), (121, 187))
        # propositions: per parent, its chunk leaves numbered
        props = pieces("n", TEXT, tree, "propositions", "M")
        assert [(p.start, p.end, p.sentences) for p in props] == [
            (0, 67, ((0, 67),)),
            (67, 121, ((67, 121),)),
            (121, 187, ((121, 187),)),
        ]

    def test_a_piece_without_letters_gets_none(self) -> None:
        text = "Alpha beta.\n\n---\n\nGamma delta.\n"
        found = pieces("j", text, _tree(text, key="j"), "questions", "M")
        assert [text[p.start : p.end] for p in found] == ["Alpha beta.\n\n", "Gamma delta.\n"]


class TestPrompts:
    def test_proposition_prompt_numbers_the_sentences(self) -> None:
        piece = pieces("n", TEXT, _tree(), "propositions", "M")[1]
        assert piece.prompt() == (
            f"<document>\n{TEXT}\n</document>\n"
            "Here is a passage of the document, its sentences numbered:\n"
            "<passage>\n[1] The Normans lived in Normandy.\n[2] Rollo was their leader.\n"
            "</passage>\n" + INSTRUCTIONS
        )
        assert PROMPTS["propositions"].endswith(INSTRUCTIONS)

    def test_question_prompt(self) -> None:
        piece = pieces("n", TEXT, _tree(), "questions", "M")[3]
        assert piece.prompt() == (
            f"<document>\n{TEXT}\n</document>\n"
            "Here is a passage of the document:\n"
            "<passage>\nWilliam crossed the sea in 1066.\n</passage>\n"
            "Write up to 5 questions that the passage answers, each one self-contained "
            "(name the entities it asks about; no pronouns that need the passage to be "
            "understood). Write one question per line. Answer only with the questions and "
            "nothing else."
        )

    def test_summary_prompt_of_a_section_and_of_a_whole_document(self) -> None:
        tail = (
            "Summarize it in one or two self-contained sentences (name the entities it is "
            "about; no pronouns that need the document to be understood), for the purposes "
            "of improving search retrieval of it. Answer only with the summary and nothing else."
        )
        section = pieces("n", TEXT, _tree(), "summaries", "M")[1]
        assert section.prompt() == (
            f"<document>\n{TEXT}\n</document>\nHere is a section of the document:\n"
            "<passage>\n## Norman conquest\n\nWilliam crossed the sea in 1066.\n</passage>\n" + tail
        )
        whole = pieces("n", TEXT, _tree(mode="parent"), "summaries", "M")[0]
        assert whole.prompt() == (
            f"Here is the document:\n<passage>\n{TEXT.strip()}\n</passage>\n" + tail
        )


class TestCacheKeys:
    def test_key_is_the_digest_of_what_the_model_is_shown(self) -> None:
        for kind in ("propositions", "questions", "summaries"):
            for piece in pieces("n", TEXT, _tree(), kind, "Fake:m1"):
                shown = TEXT[piece.start : piece.end]
                assert piece.key == _digest_key(kind, "Fake:m1", TEXT, shown)
                assert piece.key == cache_key(kind, "Fake:m1", text_digest(TEXT), shown)

    def test_kind_and_model_are_in_the_key(self) -> None:
        keys = {
            pieces("n", TEXT, _tree(), kind, model)[1].key
            for kind in ("propositions", "questions")
            for model in ("A", "B")
        }
        assert len(keys) == 4

    def test_a_long_documents_window_is_in_the_key(self) -> None:
        filler = "Filler words stand here. " * 1000  # 25,000 characters
        text = f"Same paragraph here.\n\n{filler}\n\n{filler}\n\nSame paragraph here.\n"
        assert len(text) > DOCUMENT_CHARS
        found = pieces("l", text, _tree(text, key="l"), "questions", "M")
        first, last = found[0], found[-1]
        assert text[first.start : first.end].strip() == "Same paragraph here."
        assert text[last.start : last.end].strip() == "Same paragraph here."
        assert first.key == _digest_key(
            "questions", "M", text, text[first.start : first.end], f"window 0:{DOCUMENT_CHARS}"
        )
        lo = len(text) - DOCUMENT_CHARS
        assert last.key == _digest_key(
            "questions", "M", text, text[last.start : last.end], f"window {lo}:{len(text)}"
        )
        assert first.key != last.key
        assert last.prompt().startswith(f"<document>\n{text[lo:]}\n</document>\n")


def _piece(
    kind: str, sentences: tuple[tuple[int, int], ...] = ((10, 20), (20, 35), (35, 50))
) -> ProxyPiece:
    return ProxyPiece("k", "s", kind, "x" * 60, 10, 50, sentences)


class TestParsing:
    def test_a_proposition_spans_the_sentences_it_names(self) -> None:
        answer = "[1] One.\n[2,3] Two and three.\n[1-3] All.\n[3, 1] Backwards."
        assert parse(_piece("propositions"), answer) == [
            Proxy("One.", 10, 20, "proposition"),
            Proxy("Two and three.", 20, 50, "proposition"),
            Proxy("All.", 10, 50, "proposition"),
            Proxy("Backwards.", 10, 50, "proposition"),
        ]

    def test_bad_numbers_are_ignored_and_none_left_means_the_piece(self) -> None:
        answer = (
            "[2,9] Two.\n[0] Zero.\n[] Empty.\n[x] Letter.\n[²] Superscript.\nNo citation.\n"
            "[99999999999999999999] Huge.\n[1-2-3] Odd range."
        )
        assert parse(_piece("propositions"), answer) == [
            Proxy("Two.", 20, 35, "proposition"),
            Proxy("Zero.", 10, 50, "proposition"),
            Proxy("Empty.", 10, 50, "proposition"),
            Proxy("[x] Letter.", 10, 50, "proposition"),
            Proxy("[²] Superscript.", 10, 50, "proposition"),
            Proxy("No citation.", 10, 50, "proposition"),
            Proxy("Huge.", 10, 50, "proposition"),
            Proxy("Odd range.", 10, 50, "proposition"),
        ]

    def test_empty_lines_markers_duplicates_and_empty_texts(self) -> None:
        answer = "\n  \n- [1]   One   here.\n2. [1] One here.\n[2]\n[3]   \n"
        assert parse(_piece("propositions"), answer) == [Proxy("One here.", 10, 20, "proposition")]

    def test_questions_stand_for_the_piece(self) -> None:
        answer = "1. Who led the Normans?\n\n- Where is Normandy?\n* Who led the Normans?\nQ: When?"
        assert parse(_piece("questions"), answer) == [
            Proxy("Who led the Normans?", 10, 50, "question"),
            Proxy("Where is Normandy?", 10, 50, "question"),
            Proxy("When?", 10, 50, "question"),
        ]

    def test_questions_are_capped(self) -> None:
        answer = "\n".join(f"Question {i}?" for i in range(9))
        assert [p.text for p in parse(_piece("questions"), answer)] == [
            f"Question {i}?" for i in range(5)
        ]

    def test_a_summary_is_one_line_and_an_empty_one_is_none(self) -> None:
        assert parse(_piece("summaries"), "The Normans\nlived  there.") == [
            Proxy("The Normans lived there.", 10, 50, "summary")
        ]
        assert parse(_piece("summaries"), " \n ") == []

    def test_texts_and_answers_are_capped(self) -> None:
        long = "w" * 5000
        assert parse(_piece("questions"), long) == [Proxy("w" * 1000, 10, 50, "question")]
        assert tidy(" a  b \n\n  \n" + "c" * 9000) == ("a b\n" + "c" * 9000)[:8000]


def _run(writer: Any) -> Any:
    def run(request: Request[Any]) -> Any:
        assert isinstance(request, WriteProxies)
        return writer.write(request.pieces)

    return run


def _arun(writer: Any) -> Any:
    async def arun(request: Request[Any]) -> Any:
        assert isinstance(request, WriteProxies)
        return await writer.awrite(request.pieces)

    return arun


class TestHook:
    def test_propositions_through_the_writer(self) -> None:
        model = Proposing()
        writer = proxy_writer(model, InMemoryByteStore())
        hook = written_proxies("propositions", "Proposing")
        doc = Document(page_content=TEXT, id="n")
        out = drive(hook([doc], [_tree()]), _run(writer))
        assert model.calls == 6
        assert out == [
            [
                Proxy("P: # Normans", 0, 11, "proposition"),
                Proxy("bad", 0, 11, "proposition"),
                Proxy("P: The Normans", 11, 42, "proposition"),
                Proxy("P: Rollo was", 42, 67, "proposition"),
                Proxy("bad", 11, 67, "proposition"),
                Proxy("P: ## Norman", 67, 87, "proposition"),
                Proxy("bad", 67, 87, "proposition"),
                Proxy("P: William crossed", 87, 121, "proposition"),
                Proxy("bad", 87, 121, "proposition"),
                Proxy("P: ### Aftermath", 121, 136, "proposition"),
                Proxy("bad", 121, 136, "proposition"),
                Proxy("P: It was", 136, 172, "proposition"),
                Proxy("P: The town", 172, 187, "proposition"),
                Proxy("bad", 136, 187, "proposition"),
            ]
        ]

    def test_summaries_and_questions(self) -> None:
        model = Proposing()
        writer = proxy_writer(model, InMemoryByteStore())
        doc = Document(page_content=TEXT)
        summaries = drive(written_proxies("summaries", "M")([doc], [_tree()]), _run(writer))
        assert summaries == [
            [
                Proxy("S: # Normans The", 0, 67, "summary"),
                Proxy("S: ## Norman conquest", 67, 121, "summary"),
                Proxy("S: ### Aftermath It", 121, 187, "summary"),
            ]
        ]
        questions = drive(written_proxies("questions", "M")([doc], [_tree()]), _run(writer))
        assert questions[0][2:4] == [
            Proxy("What about The?", 11, 67, "question"),
            Proxy("Why The?", 11, 67, "question"),
        ]
        assert len(questions[0]) == 12
        assert model.calls == 3 + 6

    def test_batched_and_each_key_asked_once(self) -> None:
        model = Proposing()
        batches: list[int] = []
        original = model.batch

        def counted(inputs: list[Any], *args: Any, **kwargs: Any) -> list[Any]:
            batches.append(len(inputs))
            return original(inputs, *args, **kwargs)

        object.__setattr__(model, "batch", counted)
        writer = proxy_writer(model, InMemoryByteStore())
        texts = [f"Paragraph number {i} is here.\n" for i in range(20)]
        docs = [Document(page_content=t) for t in texts] + [Document(page_content=texts[0])]
        trees = [_tree(d.page_content, key=f"d{i}") for i, d in enumerate(docs)]
        out = drive(written_proxies("questions", "M")(docs, trees), _run(writer))
        assert batches == [BATCH, 20 - BATCH]
        assert model.calls == 20
        assert (
            out[20]
            == out[0]
            == [
                Proxy("What about Paragraph?", 0, 28, "question"),
                Proxy("Why Paragraph?", 0, 28, "question"),
            ]
        )

    def test_the_cache_answers_a_second_add(self) -> None:
        model = Proposing()
        cache = InMemoryByteStore()
        doc = Document(page_content=TEXT)
        hook = written_proxies("propositions", "M")
        first = drive(hook([doc], [_tree()]), _run(proxy_writer(model, cache)))
        assert model.calls == 6
        again = drive(hook([doc], [_tree()]), _run(proxy_writer(model, cache)))
        assert model.calls == 6
        assert again == first
        key = pieces("n", TEXT, _tree(), "propositions", "M")[1].key
        assert cache.mget([key]) == [
            b"[1] P: The Normans\n[2] P: Rollo was\n[0,99] bad",
        ]

    def test_one_failed_call_fails_the_whole_request(self) -> None:
        model = Proposing(fail_on="William")
        cache = InMemoryByteStore()
        doc = Document(page_content=TEXT, id="n")
        hook = written_proxies("questions", "M")
        with pytest.raises(ContextFailedError) as err:
            drive(hook([doc], [_tree()]), _run(proxy_writer(model, cache)))
        assert str(err.value) == (
            "The proxy model failed for 1 of 6 pieces (first: source 'n', RuntimeError: the "
            "provider refused 'William crossed the '); nothing was added, and the proxies it "
            "wrote are cached for the next try."
        )
        assert model.calls == 6
        assert len(list(cache.yield_keys())) == 5  # what it answered is kept for the next try
        healthy = Proposing()
        out = drive(hook([doc], [_tree()]), _run(proxy_writer(healthy, cache)))
        assert healthy.calls == 1
        assert out[0][6:8] == [
            Proxy("What about William?", 87, 121, "question"),
            Proxy("Why William?", 87, 121, "question"),
        ]

    def test_async_matches_sync(self) -> None:
        doc = Document(page_content=TEXT)
        hook = written_proxies("summaries", "M")
        model = Proposing()
        out = asyncio.run(
            adrive(hook([doc], [_tree()]), _arun(proxy_writer(model, InMemoryByteStore())))
        )
        sync = drive(hook([doc], [_tree()]), _run(proxy_writer(Proposing(), InMemoryByteStore())))
        assert out == sync
        assert model.calls == 3

    def test_nothing_to_ask_asks_nothing(self) -> None:
        text = "---\n"
        out = drive(
            written_proxies("questions", "M")([Document(page_content=text)], [_tree(text)]),
            _run(None),
        )
        assert out == [[]]

    def test_setting_and_bad_kind(self) -> None:
        hook = written_proxies("summaries", "Fake:m")
        assert hook == WrittenProxies("summaries", "Fake:m")
        assert hook.setting() == {"kind": "summaries", "model": "Fake:m", "prompt": "summary-1"}
        with pytest.raises(ValueError, match=r"^proxies='summary' is not a kind of model-written"):
            written_proxies("summary", "M")
        assert propose.PROXY_KINDS == {
            "propositions": "proposition",
            "summaries": "summary",
            "questions": "question",
        }


class TestLongPieces:
    def test_a_piece_longer_than_the_window_is_shown_as_its_beginning_alone(self) -> None:
        sentence = "Filler words stand here. "  # 25 characters
        text = sentence * 1400 + "\n"  # 35,001 characters, one paragraph, one section
        tree = _tree(text, mode="parent", key="L")
        (summary,) = pieces("L", text, tree, "summaries", "M")
        assert (summary.start, summary.end) == (0, len(text))
        assert summary.prompt() == PROMPTS["summaries"].format(
            document="", what="the document", passage=text[:DOCUMENT_CHARS].strip()
        )
        spans = tuple((i * 25, (i + 1) * 25) for i in range(1400))
        paragraph = ProxyPiece("k", "L", "propositions", text, 0, len(text), spans)
        assert len(paragraph.numbered()) == DOCUMENT_CHARS // 25 == 1280
        prompt = paragraph.prompt()
        assert "<document>" not in prompt
        assert "[1280] Filler words stand here.\n</passage>" in prompt
        assert "[1281]" not in prompt
        cited = parse(paragraph, "[1280] Last.\n[1281] Unseen.")
        assert cited == [
            Proxy("Last.", 1279 * 25, 1280 * 25, "proposition"),
            Proxy("Unseen.", 0, len(text), "proposition"),
        ]
