"""The model-written context: one call per paragraph, batched, cached by digest, all or nothing."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryByteStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.situate import (
    DOCUMENT_CHARS,
    PROMPT,
    PROMPT_VERSION,
    Piece,
    cache_key,
    text_digest,
)
from langchain_s2b.core.splitters import SentenceSplitter
from langchain_s2b.core.tree import Level
from langchain_s2b.store.nodes.situator import ContextFailedError

from ._chat import Situating, chunk_of
from .test_headers import Recording

TEXT = """# Normans

The Normans lived in Normandy. Rollo was their leader.

## Norman conquest

William crossed the sea in 1066.

### Aftermath

It was founded in 1066 by the duke. The town grew.
"""
PARAGRAPHS = [p.strip() for p in re.split(r"\n\n", TEXT) if p.strip()]
"""The multilevel tree's paragraphs (a heading line is a paragraph of its own)."""


def _context(paragraph: str) -> str:
    return "Context of: " + " ".join(paragraph.split()[:3])


def _retriever(model: Situating, **fields: Any) -> SmallToBigRetriever:
    fields.setdefault("mode", "multilevel")
    fields.setdefault("vectorstore", FaissIndex(Recording()))
    return SmallToBigRetriever(context_model=model, **fields)


def _doc(**meta: Any) -> Document:
    return Document(page_content=TEXT, metadata=meta)


class TestCalls:
    def test_one_call_per_paragraph_with_the_document_in_the_prompt(self) -> None:
        model = Situating()
        _retriever(model).add_documents([_doc()], ["n"])
        assert model.calls == len(PARAGRAPHS) == 6
        assert sorted(c.strip() for c in model.chunks) == sorted(PARAGRAPHS)  # a batch: any order
        for prompt, chunk in zip(model._calls, model.chunks, strict=True):
            assert prompt == PROMPT.format(document=TEXT, chunk=chunk)

    def test_sentences_share_their_paragraphs_context_and_embed_it(self) -> None:
        model = Situating()
        retriever = _retriever(model, contextual_headers=True)
        retriever.add_documents([_doc(title="Quokka")], ["n"])
        emb = retriever.vectorstore.embeddings
        assert isinstance(emb, Recording)
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        found = store.get_by_ids([f"n/sentence/{i}" for i in range(8)])
        paragraph_of = [0, 1, 1, 2, 3, 4, 5, 5]
        for leaf, p, passage in zip(found, paragraph_of, emb.passages, strict=True):
            meta = leaf.metadata
            assert meta["leaf_context"] == _context(PARAGRAPHS[p])
            assert leaf.page_content == TEXT[meta["start"] : meta["end"]]
            assert passage == f"{meta['heading']}\n{meta['leaf_context']}\n\n{leaf.page_content}"

    def test_the_context_is_searched_and_never_returned(self) -> None:
        model = Situating(answer_prefix="Zygomorphic")
        retriever = _retriever(model)
        retriever.add_documents([_doc()], ["n"])
        found = retriever._io.index.search_text("zygomorphic", 20, None)  # type: ignore[attr-defined]
        assert len(found) == 8
        for doc in retriever.invoke("zygomorphic", k=None, max_tokens=1000):
            assert doc.page_content == TEXT[doc.metadata["start"] : doc.metadata["end"]]
            assert "Zygomorphic" not in str(doc.metadata)

    def test_a_long_document_is_shown_around_the_piece(self) -> None:
        text = "a" * (DOCUMENT_CHARS * 2)
        piece = Piece("k", "s", text, DOCUMENT_CHARS, DOCUMENT_CHARS + 10)
        middle = DOCUMENT_CHARS + 5
        shown = text[middle - DOCUMENT_CHARS // 2 : middle + DOCUMENT_CHARS // 2]
        assert piece.prompt() == PROMPT.format(document=shown, chunk="a" * 10)


class TestCache:
    def test_an_unchanged_document_costs_no_call(self) -> None:
        model = Situating()
        retriever = _retriever(model)
        retriever.add_documents([_doc()], ["n"])
        result = retriever.add_documents([_doc()], ["n"])
        assert result.unchanged == ["n"]
        assert model.calls == 6

    def test_a_document_written_again_reads_its_contexts_from_the_cache(self) -> None:
        model = Situating()
        retriever = _retriever(model)
        retriever.add_documents([_doc()], ["n"])
        result = retriever.add_documents([_doc(v=2)], ["n"])  # new metadata: written again
        assert result.updated == ["n"]
        other = not retriever.contextual_headers  # another setting: every leaf embedded again
        headed = retriever.model_copy(update={"contextual_headers": other})
        assert headed.add_documents([_doc(v=2)], ["n"]).updated == ["n"]
        assert model.calls == 6

    def test_a_cache_shared_across_retrievers_and_processes(self) -> None:
        cache = InMemoryByteStore()
        first, second = Situating(), Situating()
        _retriever(first, context_cache=cache).add_documents([_doc()], ["n"])
        _retriever(second, context_cache=cache).add_documents([_doc()], ["n"])
        assert (first.calls, second.calls) == (6, 0)

    def test_an_edited_document_asks_again(self) -> None:
        model = Situating()
        retriever = _retriever(model)
        retriever.add_documents([_doc()], ["n"])
        edited = Document(page_content=TEXT.replace("grew", "shrank"))
        retriever.add_documents([edited], ["n"])
        assert model.calls == 12  # the document is in every prompt: every context is new

    def test_async_adds_use_the_same_cache(self) -> None:
        model = Situating()
        retriever = _retriever(model)
        asyncio.run(retriever.aadd_documents([_doc()], ["n"]))
        asyncio.run(retriever.aadd_documents([_doc(v=2)], ["n"]))
        assert model.calls == 6


SHOWN = re.compile(r"<document>\n(.*?)\n</document>", re.DOTALL)


def shown(prompt: str) -> str:
    """The document (or the window of it) a context prompt shows."""
    found = SHOWN.search(prompt)
    assert found is not None, prompt
    return found.group(1)


class WindowAware(Situating):
    """Answers with the first four words of the document window it was shown."""

    def answer_prompt(self, prompt: str) -> str:
        return "Shown from: " + " ".join(shown(prompt).split()[:4])


class TestLongDocuments:
    """Over DOCUMENT_CHARS the model is shown a window: the cache key is that window's."""

    # On a one-level sentence tree every sentence is a piece (window mode's default tree has
    # paragraphs since issue 32, and then a paragraph is the piece). The same sentence opens
    # and closes a document of 1,000 numbered 100-character sentences: the two are shown in
    # two windows, the document's first DOCUMENT_CHARS characters and its last.
    FILL = tuple(f"Filler sentence {i:04d} {'x' * 77}." for i in range(1_000))
    BELL = "The bell rang twice."
    TEXT = " ".join([BELL, *FILL, BELL, ""])  # each bell's leaf: its sentence and a space

    def _add(self, model: Situating, cache: Any = None, *, sync: bool = True) -> Any:
        retriever = _retriever(
            model,
            mode="window",
            levels=[Level("sentence", SentenceSplitter())],
            context_cache=cache or InMemoryByteStore(),
        )
        doc = Document(page_content=self.TEXT)
        if sync:
            retriever.add_documents([doc], ["n"])
        else:
            asyncio.run(retriever.aadd_documents([doc], ["n"]))
        return retriever

    @pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
    def test_equal_pieces_far_apart_are_two_prompts_and_two_contexts(self, sync: bool) -> None:
        model = WindowAware()
        retriever = self._add(model, sync=sync)
        text = self.TEXT
        assert len(text) == 100_042
        near, far = text[:DOCUMENT_CHARS], text[-DOCUMENT_CHARS:]
        asked = [shown(p) for p in model._calls if chunk_of(p).strip() == self.BELL]
        assert sorted(asked) == sorted([near, far])  # both prompts were sent
        assert model.calls == 1_002  # one per sentence
        store = retriever.vectorstore
        assert isinstance(store, FaissIndex)
        first, last = store.get_by_ids(["n/sentence/0", "n/sentence/1001"])
        assert first.page_content == last.page_content == self.BELL + " "
        assert first.metadata["leaf_context"] == "Shown from: The bell rang twice."
        # the far window starts at 100,042 - 32,000 = 68,042: sentence 680 (at 21 + 100 * 680)'s x's
        assert text[68_042 - 21 : 68_042] == "Filler sentence 0680 "
        assert last.metadata["leaf_context"] == "Shown from: " + " ".join(far.split()[:4])
        assert " ".join(far.split()[:4]) == f"{'x' * 77}. Filler sentence 0681"

    def test_a_short_documents_keys_are_those_it_always_had(self) -> None:
        # the whole document shown: no window in the key, so caches filled before stay good
        digest = text_digest(TEXT)
        old = hashlib.sha256(
            f"{PROMPT_VERSION}\x00m\x00{digest}\x00{PARAGRAPHS[1]}".encode()
        ).hexdigest()
        assert cache_key("m", digest, PARAGRAPHS[1]) == f"s2b-context/{old}"
        assert cache_key("m", digest, PARAGRAPHS[1], (0, 9)) != f"s2b-context/{old}"

    def test_the_cache_keeps_both_and_an_unchanged_document_costs_no_call(self) -> None:
        cache = InMemoryByteStore()
        first, again = WindowAware(), WindowAware()
        self._add(first, cache)
        retriever = self._add(again, cache)
        assert (first.calls, again.calls) == (1_002, 0)
        (last,) = retriever.vectorstore.get_by_ids(["n/sentence/1001"])
        assert last.metadata["leaf_context"].startswith("Shown from: xxx")


class TestFailure:
    def test_one_failed_call_fails_the_add_as_a_whole(self) -> None:
        cache = InMemoryByteStore()
        failing = Situating(fail_on="William")
        retriever = _retriever(failing, context_cache=cache)
        with pytest.raises(ContextFailedError) as err:
            retriever.add_documents([_doc()], ["n"])
        assert str(err.value) == (
            "The context model failed for 1 of 6 pieces (first: source 'n', RuntimeError: the "
            "provider refused the chunk 'William crossed the '); nothing was added, and the "
            "contexts it wrote are cached for the next try."
        )
        assert list(retriever.docstore.yield_keys()) == []
        assert len(retriever.vectorstore.get_by_ids(["n/sentence/0"])) == 0
        fixed = Situating()
        _retriever(fixed, context_cache=cache).add_documents([_doc()], ["n"])
        assert [c.strip() for c in fixed.chunks] == [PARAGRAPHS[3]]  # only what failed

    def test_a_failed_update_keeps_the_previous_version(self) -> None:
        retriever = _retriever(Situating())
        retriever.add_documents([_doc()], ["n"])
        before = retriever.invoke("duke founded", k=1)
        broken = retriever.model_copy(update={"context_model": Situating(fail_on="William")})
        with pytest.raises(ContextFailedError):
            broken.add_documents([Document(page_content=TEXT + "\nWilliam again.\n")], ["n"])
        assert retriever.invoke("duke founded", k=1) == before

    def test_async_failure_is_the_same(self) -> None:
        retriever = _retriever(Situating(fail_on="Rollo"))
        with pytest.raises(ContextFailedError, match="failed for 1 of 6 pieces"):
            asyncio.run(retriever.aadd_documents([_doc()], ["n"]))
        assert list(retriever.docstore.yield_keys()) == []


def test_verify_checks_headers_and_repairs_from_the_cache() -> None:
    model = Situating()
    retriever = _retriever(model, contextual_headers=True)
    retriever.add_documents([_doc(title="Quokka")], ["n"])
    assert retriever.verify(digests=True).ok
    retriever.vectorstore.delete(["n/sentence/3"])  # a lost leaf
    report = retriever.verify(repair=True)
    assert report.rebuilt == ["n"]
    assert retriever.verify(digests=True).ok
    assert model.calls == 6  # the repair wrote the source again from its cached contexts
    store = retriever.vectorstore
    assert isinstance(store, FaissIndex)
    held = store.keys()
    (leaf,) = store.get_by_ids([k for k in held if k.endswith("/sentence/4")])
    assert leaf.metadata["leaf_context"] == _context(PARAGRAPHS[3])
    assert leaf.metadata["heading"] == "Quokka > Normans > Norman conquest"
