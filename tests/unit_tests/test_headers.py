"""Contextual headers: the outline a header comes from, and what is embedded, kept and returned."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.budget import approximate_tokens
from langchain_s2b.core.headers import Heading, Outline, embedded_text, header, outline

from ._embeddings import BagOfWords

TEXT = """# Normans

The Normans lived in Normandy. Rollo was their leader.

## Norman conquest

William crossed the sea in 1066.

### Aftermath

It was founded in 1066 by the duke. The town grew.
"""
TITLE = "Quokka Chronicle"
"""A title that is nowhere in the text: it can only come from the header."""
TOP = f"{TITLE} > Normans"
CONQUEST = f"{TOP} > Norman conquest"
AFTERMATH = f"{CONQUEST} > Aftermath"
SENTENCES = [
    ("# Normans", TOP),
    ("The Normans lived in Normandy.", TOP),
    ("Rollo was their leader.", TOP),
    ("## Norman conquest", CONQUEST),
    ("William crossed the sea in 1066.", CONQUEST),
    ("### Aftermath", AFTERMATH),
    ("It was founded in 1066 by the duke.", AFTERMATH),
    ("The town grew.", AFTERMATH),
]
"""Each sentence leaf, in order, and its header (worked out by hand)."""


def _tiled() -> list[str]:
    """Each leaf's text: from its sentence to the next one's (the tiling contract)."""
    starts, at = [], 0
    for sentence, _ in SENTENCES:
        at = TEXT.index(sentence, at)
        starts.append(at)
    starts[0] = 0
    return [TEXT[a:b] for a, b in zip(starts, [*starts[1:], len(TEXT)], strict=True)]


LEAVES = _tiled()
HEADED = [f"{head}\n\n{leaf}" for leaf, (_, head) in zip(LEAVES, SENTENCES, strict=True)]


class Recording(Embeddings):
    """BagOfWords that keeps every passage it embedded."""

    def __init__(self) -> None:
        self.inner = BagOfWords()
        self.passages: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.passages += texts
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def _retriever(emb: Embeddings | None = None, **fields: Any) -> SmallToBigRetriever:
    fields.setdefault("mode", "window")
    fields.setdefault("contextual_headers", True)
    retriever = SmallToBigRetriever(vectorstore=FaissIndex(emb or Recording()), **fields)
    retriever.add_documents([Document(page_content=TEXT, metadata={"title": TITLE})], ids=["n"])
    return retriever


# The outline -------------------------------------------------------------------------


def _titles(text: str) -> list[tuple[int, str]]:
    return [(h.level, h.title) for h in outline(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# A\n\nx\n\n## B ##\n\ny\n\n### C\n", [(1, "A"), (2, "B"), (3, "C")]),
        ("#hashtag\n\n####### seven\n\n#\n", []),
        ("   ## indented three\n\n    # code by indentation\n", [(2, "indented three")]),
        ("Title\n=====\n\nSub\n---\n\ntext\n", [(1, "Title"), (2, "Sub")]),
        ("# A\n\nSub\n---\n\nOther\n===\n", [(1, "A"), (2, "Sub"), (1, "Other")]),
        ("# A\n\n```python\n# a comment\n```\n\n## B\n", [(1, "A"), (2, "B")]),
        ("# A\n\n~~~~\n# inside\n~~~~~\n## B\n", [(1, "A"), (2, "B")]),
        ("---\ntitle: x\nkind: y\n---\n# Real\n", [(1, "Real")]),
        ("text\n\n---\n\nmore\n", []),
    ],
    ids=[
        "atx",
        "not-atx",
        "indent",
        "setext",
        "setext-in-markdown",
        "fence",
        "tilde-fence",
        "front-matter",
        "thematic-break",
    ],
)
def test_markdown_outline(text: str, expected: list[tuple[int, str]]) -> None:
    assert _titles(text) == expected


def test_restructuredtext_levels_follow_first_appearance() -> None:
    text = (
        "=====\nGuide\n=====\n\nInstall\n=======\n\nLinux\n~~~~~\n\napt.\n\n"
        "Windows\n~~~~~~~\n\nUsage\n=======\n\nshort\n~~\n"
    )
    assert _titles(text) == [
        (1, "Guide"),
        (2, "Install"),
        (3, "Linux"),
        (3, "Windows"),
        (2, "Usage"),
    ]
    # ``short`` under ``~~`` is shorter than its title would need to be: not a title
    found = Outline.of(text)
    assert found.path_at(text.index("apt.")) == ("Guide", "Install", "Linux")
    assert found.path_at(text.index("short")) == ("Guide", "Usage")


def test_html_headings() -> None:
    text = "<h1>A &amp; B</h1><p>x</p><H2 class='q'>Sub <b>bold</b>\n</H2><h3></h3>"
    assert outline(text) == [Heading(0, 1, "A & B"), Heading(26, 2, "Sub bold")]


def test_header_leaves_out_a_section_that_repeats_the_title() -> None:
    assert header("getting-started", ["Getting Started", "Linux"]) == "getting-started > Linux"
    assert header("Valley", ["Valley", "Valley"]) == "Valley > Valley"  # a subsection of its own
    assert header("", ["A", "B"]) == "A > B"
    assert header("T", []) == "T"
    assert header("", []) == ""


def test_embedded_text_is_the_text_alone_without_notes() -> None:
    assert embedded_text("body", {"title": "x"}) == "body"
    assert embedded_text("body", {"heading": "H"}) == "H\n\nbody"
    assert embedded_text("body", {"heading": "H", "leaf_context": "C"}) == "H\nC\n\nbody"
    assert embedded_text("body", {"heading": "", "leaf_context": "C"}) == "C\n\nbody"


# What is embedded, kept and returned ------------------------------------------------------


class TestEmbedded:
    def test_each_leaf_is_embedded_under_its_title_and_section_path(self) -> None:
        emb = Recording()
        _retriever(emb)
        assert emb.passages == HEADED

    def test_headers_off_embeds_the_text_alone(self) -> None:
        emb = Recording()
        _retriever(emb, contextual_headers=False)
        assert emb.passages == LEAVES

    def test_the_first_heading_is_the_title_without_title_metadata(self) -> None:
        emb = Recording()
        retriever = SmallToBigRetriever(vectorstore=FaissIndex(emb), mode="window")
        retriever = retriever.model_copy(update={"contextual_headers": True})
        retriever.add_documents([Document(page_content=TEXT)], ids=["n"])
        assert emb.passages[-1] == f"Normans > Norman conquest > Aftermath\n\n{LEAVES[-1]}"

    def test_a_callable_writes_its_own_header(self) -> None:
        emb = Recording()

        def headed(document: Document, leaf: Document) -> str:
            return f"{document.metadata['title']} #{leaf.metadata['split_id']}"

        _retriever(emb, contextual_headers=headed)
        assert emb.passages == [f"{TITLE} #{i}\n\n{leaf}" for i, leaf in enumerate(LEAVES)]

    def test_a_callable_that_returns_no_string_is_one_line(self) -> None:
        with pytest.raises(TypeError, match=r"returned int for leaf 'n/sentence/0'; it must"):
            _retriever(contextual_headers=lambda doc, leaf: 3)

    def test_a_bad_setting_is_refused(self) -> None:
        refused = r"contextual_headers must be True, False, None \(by the leaves\) or a call"
        with pytest.raises(ValueError, match=refused):
            SmallToBigRetriever(vectorstore=FaissIndex(BagOfWords()), contextual_headers="yes")

    def test_a_store_that_embeds_page_content_itself_is_refused(self) -> None:
        store = InMemoryVectorStore(BagOfWords())
        retriever = SmallToBigRetriever(vectorstore=store, contextual_headers=True, hybrid=False)
        with pytest.raises(ValueError, match="InMemoryVectorStore embeds each leaf's page_content"):
            retriever.add_documents([Document(page_content=TEXT)], ids=["n"])
        assert list(retriever.docstore.yield_keys()) == []  # undone like any failed add

    def test_the_lexical_index_searches_the_header(self) -> None:
        on, off = _retriever(), _retriever(contextual_headers=False)
        found = on._io.index.search_text("quokka", 20, None)  # type: ignore[attr-defined]
        assert sorted(key for key, _ in found) == [f"n/sentence/{i}" for i in range(8)]
        assert off._io.index.search_text("quokka", 20, None) == []  # type: ignore[attr-defined]


class TestReturned:
    """A header never leaks into what comes back: text, offsets, hits, budgets."""

    def test_the_child_index_keeps_the_text_alone(self) -> None:
        store = _retriever().vectorstore
        assert isinstance(store, FaissIndex)
        for i, (text, head) in enumerate(SENTENCES):
            (leaf,) = store.get_by_ids([f"n/sentence/{i}"])
            start, end = leaf.metadata["start"], leaf.metadata["end"]
            assert leaf.page_content == TEXT[start:end]
            assert leaf.page_content.strip() == text
            assert leaf.metadata["heading"] == head

    def test_hits_carry_the_text_alone(self) -> None:
        retriever = _retriever()
        index = retriever._io.index
        found = index.search(index.embed_query("quokka duke"), "quokka duke", 8, None)
        assert len(found.hits) == 8
        read = index.read_hits([hit.key for hit in found.hits])  # a search's hits come unread
        assert len(read) == 8
        for hit in read.values():
            assert hit.text == TEXT[hit.start : hit.end]
            assert TITLE not in hit.text

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_results_are_source_slices_with_their_best_matchs_heading(self, mode: str) -> None:
        docs = _retriever(mode=mode).invoke("founded duke", k=1)
        (doc,) = docs
        meta = doc.metadata
        assert doc.page_content == TEXT[meta["start"] : meta["end"]]
        assert TITLE not in doc.page_content
        best = max(meta["matches"], key=lambda m: (m["score"], -m["start"]))
        assert "It was founded in 1066 by the duke." in TEXT[best["start"] : best["end"]]
        assert meta["heading"] == AFTERMATH
        for match in meta["matches"]:
            assert match["start"] >= meta["start"]
            assert match["end"] <= meta["end"]

    def test_headers_off_results_carry_no_heading(self) -> None:
        (doc,) = _retriever(contextual_headers=False).invoke("founded duke", k=1)
        assert "heading" not in doc.metadata

    def test_a_budget_counts_the_text_alone(self) -> None:
        retriever = _retriever(window_size=0)
        (whole,) = retriever.invoke("founded duke", k=1)
        budget = approximate_tokens(whole.page_content)
        (doc,) = retriever.invoke("founded duke", k=1, max_tokens=budget)
        assert doc.page_content == whole.page_content  # whole: a header counted would cut it
        assert doc.metadata["tokens"] == budget
        assert "escalation" not in doc.metadata

    def test_pack_tokens_count_the_text_alone(self) -> None:
        docs = _retriever(mode="pack").invoke("founded duke", k=None, max_tokens=40)
        assert docs
        assert sum(d.metadata["tokens"] for d in docs) <= 40
        for doc in docs:
            assert doc.metadata["tokens"] == approximate_tokens(doc.page_content)

    def test_async_and_batch_agree(self) -> None:
        retriever = _retriever(mode="parent")
        want = retriever.invoke("quokka rollo", k=2)
        assert asyncio.run(retriever.ainvoke("quokka rollo", k=2)) == want
        assert retriever.batch(["quokka rollo"], k=2) == [want]
        assert [d.metadata["heading"] for d in want] == [TOP, CONQUEST]  # one child per section


class TestSettingChange:
    """Re-adding with another setting re-embeds exactly what it says (Python API)."""

    def test_the_same_documents_under_headers_are_written_again(self) -> None:
        emb = Recording()
        off = _retriever(emb, contextual_headers=False)
        on = off.model_copy(update={"contextual_headers": True})
        emb.passages.clear()
        result = on.add_documents([Document(page_content=TEXT, metadata={"title": TITLE})], ["n"])
        assert result.updated == ["n"]
        assert emb.passages == HEADED
        emb.passages.clear()
        again = on.add_documents([Document(page_content=TEXT, metadata={"title": TITLE})], ["n"])
        assert again.unchanged == ["n"]
        assert emb.passages == []
        back = off.add_documents([Document(page_content=TEXT, metadata={"title": TITLE})], ["n"])
        assert back.updated == ["n"]
        assert emb.passages == LEAVES  # the texts of before: their vectors are reusable


class TestSaved:
    """A save records what is embedded beside each leaf; load refuses another setting."""

    def test_load_takes_the_saved_setting(self, tmp_path: Any) -> None:
        _retriever(mode="parent").save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", Recording())
        assert loaded.contextual_headers is True
        (doc,) = loaded.invoke("founded duke", k=1)
        assert doc.metadata["heading"] == AFTERMATH

    def test_another_setting_is_refused_in_one_line(self, tmp_path: Any) -> None:
        _retriever().save(tmp_path / "on")
        with pytest.raises(ValueError, match=r"was built with contextual_headers=True, not False;"):
            SmallToBigRetriever.load(tmp_path / "on", Recording(), contextual_headers=False)
        _retriever(contextual_headers=False).save(tmp_path / "off")
        with pytest.raises(ValueError, match=r"was built with contextual_headers=False, not True;"):
            SmallToBigRetriever.load(tmp_path / "off", Recording(), contextual_headers=True)

    def test_a_callable_is_passed_again(self, tmp_path: Any) -> None:
        def headed(document: Document, leaf: Document) -> str:
            return "custom"

        _retriever(contextual_headers=headed).save(tmp_path / "idx")
        with pytest.raises(ValueError, match=r"built with a contextual_headers callable; pass it"):
            SmallToBigRetriever.load(tmp_path / "idx", Recording())
        with pytest.raises(ValueError, match=r"contextual_headers=<its callable>, not True;"):
            SmallToBigRetriever.load(tmp_path / "idx", Recording(), contextual_headers=True)
        loaded = SmallToBigRetriever.load(tmp_path / "idx", Recording(), contextual_headers=headed)
        assert loaded.contextual_headers is headed

    def test_a_context_model_is_passed_again(self, tmp_path: Any) -> None:
        from ._chat import Situating

        _retriever(context_model=Situating()).save(tmp_path / "idx")
        with pytest.raises(ValueError, match=r"built with the context model 'Situating'; pass it"):
            SmallToBigRetriever.load(tmp_path / "idx", Recording())
        model = Situating()
        loaded = SmallToBigRetriever.load(tmp_path / "idx", Recording(), context_model=model)
        assert loaded.context_model is model
        _retriever().save(tmp_path / "plain")
        with pytest.raises(ValueError, match=r"built without a context model; load it without"):
            SmallToBigRetriever.load(tmp_path / "plain", Recording(), context_model=model)

    def test_a_save_made_before_headers_is_loaded_with_them_off(self, tmp_path: Any) -> None:
        import json

        _retriever(contextual_headers=False).save(tmp_path / "idx")
        snapshot = next((tmp_path / "idx").glob("snapshot-*"))
        config = json.loads((snapshot / "s2b.json").read_text())
        assert config["embedded"] == {"contextual_headers": "off", "context_model": None}
        del config["embedded"]
        (snapshot / "s2b.json").write_text(json.dumps(config))
        assert SmallToBigRetriever.load(tmp_path / "idx", Recording()).contextual_headers is False

    def test_a_crafted_setting_is_one_line(self, tmp_path: Any) -> None:
        import json

        _retriever().save(tmp_path / "idx")
        snapshot = next((tmp_path / "idx").glob("snapshot-*"))
        config = json.loads((snapshot / "s2b.json").read_text())
        config["embedded"] = {"contextual_headers": "always", "context_model": 3}
        (snapshot / "s2b.json").write_text(json.dumps(config))
        with pytest.raises(
            ValueError, match=r"is malformed: embedded must be \{contextual_headers"
        ):
            SmallToBigRetriever.load(tmp_path / "idx", Recording())


def test_of_equal_matches_the_first_in_the_text_gives_the_heading() -> None:
    from ._embeddings import ExactWords

    text = "# Alpha\n\nZebra one.\n\n# Beta\n\nZebra two.\n"
    retriever = SmallToBigRetriever(
        vectorstore=FaissIndex(ExactWords()), mode="multilevel", contextual_headers=True
    )
    retriever.add_documents([Document(page_content=text, metadata={"title": "T"})], ["z"])
    (doc,) = retriever.invoke("zebra", k=1)
    matches = doc.metadata["matches"]
    assert [text[m["start"] : m["end"]].strip() for m in matches] == ["Zebra one.", "Zebra two."]
    assert matches[0]["score"] == matches[1]["score"]  # T > Alpha and T > Beta: as many words
    assert doc.metadata["heading"] == "T > Alpha"


class TestDefault:
    """Unnamed, headers follow the leaves: on for sentences, off for parent mode's chunks."""

    @pytest.mark.parametrize(
        ("mode", "want"),
        [("parent", False), ("window", True), ("multilevel", True), ("pack", True)],
    )
    def test_by_the_leaves(self, mode: str, want: bool) -> None:
        r = SmallToBigRetriever(vectorstore=FaissIndex(Recording()), mode=mode)
        assert r.contextual_headers is want
        assert r.model_copy(update={"mode": "window"}).contextual_headers is want  # the index's

    def test_named_settings_win(self) -> None:
        for mode, headers in (("parent", True), ("window", False)):
            r = SmallToBigRetriever(
                vectorstore=FaissIndex(Recording()),
                mode=mode,
                contextual_headers=headers,
            )
            assert r.contextual_headers is headers

    def test_a_sentence_leaf_is_embedded_under_its_header_unasked(self) -> None:
        emb = Recording()
        r = SmallToBigRetriever(vectorstore=FaissIndex(emb), mode="window")
        r.add_documents([Document("# Rollo\n\nHe led them.", metadata={"title": "Normans"})])
        led = [p for p in emb.passages if p.endswith("He led them.")]
        assert led == [embedded_text("He led them.", {"heading": "Normans > Rollo"})]
        assert led[0].startswith("Normans > Rollo")
