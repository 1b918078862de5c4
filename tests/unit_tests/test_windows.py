"""The stand-alone sentence-window expander and the splitter that feeds it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from itertools import pairwise

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import ConfigurableField, RunnableLambda
from langchain_core.stores import BaseStore, InMemoryByteStore, InMemoryStore
from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter

from langchain_s2b import SentenceWindowExpander, WindowSplitter
from langchain_s2b.core.splitters import SentenceSplitter
from langchain_s2b.expander import chunk_key
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.nodes.codec import DocumentCodecStore

from ..reference import marked_spans

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community's sunset notice
    from langchain_community.retrievers import BM25Retriever

ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth"]
ORDINALS += ["seventh", "eighth", "ninth", "tenth", "eleventh"]
SENTENCES = [f"This is the {word} sentence." for word in ORDINALS]
TEXT = " ".join(SENTENCES)


def words(text: str) -> int:
    return len(text.split())


def ten_word_splitter() -> CharacterTextSplitter:
    """10-word chunks with 5 words of overlap."""
    return CharacterTextSplitter(
        separator=" ", chunk_size=10, chunk_overlap=5, length_function=words
    )


class CountingStore(BaseStore[str, Document]):
    """An in-memory document store that counts its read calls."""

    def __init__(self) -> None:
        self.inner: InMemoryStore = InMemoryStore()
        self.mget_calls: list[list[str]] = []

    def mget(self, keys: Sequence[str]) -> list[Document | None]:
        self.mget_calls.append(list(keys))
        return self.inner.mget(keys)

    async def amget(self, keys: Sequence[str]) -> list[Document | None]:
        self.mget_calls.append(list(keys))
        return await self.inner.amget(keys)

    def mset(self, key_value_pairs: Sequence[tuple[str, Document]]) -> None:
        self.inner.mset(key_value_pairs)

    def mdelete(self, keys: Sequence[str]) -> None:
        self.inner.mdelete(keys)

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        yield from self.inner.yield_keys(prefix=prefix)


@pytest.fixture
def store() -> CountingStore:
    return CountingStore()


@pytest.fixture
def chunks(store: CountingStore) -> list[Document]:
    doc = Document(page_content=TEXT, metadata={"title": "numbers"}, id="numbers")
    return WindowSplitter(ten_word_splitter(), store).split_documents([doc])


def expected_window(split_id: int, size: int, n_chunks: int) -> str:
    """Chunk i holds sentences i and i+1, so a window of chunks lo..hi is sentences lo..hi+1."""
    lo, hi = max(0, split_id - size), min(n_chunks - 1, split_id + size)
    return " ".join(SENTENCES[lo : hi + 2])


class TestWindowSplitter:
    def test_ten_word_chunks_with_five_words_of_overlap(self, chunks):
        assert [words(c.page_content) for c in chunks] == [10] * len(chunks)
        for before, after in pairwise(chunks):
            assert before.page_content.split()[5:] == after.page_content.split()[:5]

    def test_stamps_source_split_id_offsets_and_key(self, chunks, store):
        assert [c.metadata["split_id"] for c in chunks] == list(range(len(chunks)))
        for chunk in chunks:
            meta = chunk.metadata
            start = meta["split_idx_start"]
            assert TEXT[start : start + len(chunk.page_content)] == chunk.page_content
            assert (meta["source_id"], meta["title"]) == ("numbers", "numbers")
            assert meta["source_splits"] == len(chunks)
            assert chunk.id == chunk_key("numbers", meta["split_id"])
            assert chunk.id == f"numbers/chunk/{meta['split_id']}"
        assert store.inner.mget([c.id for c in chunks]) == chunks

    @pytest.mark.parametrize(
        "splitter",
        [
            RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=15),
            SentenceSplitter(),
            CharacterTextSplitter(separator=".", chunk_size=30, chunk_overlap=0),
        ],
        ids=["recursive", "sentences", "character"],
    )
    def test_any_text_splitter(self, splitter):
        store = InMemoryStore()
        out = WindowSplitter(splitter, store).split_documents([Document(page_content=TEXT, id="t")])
        if isinstance(splitter, SentenceSplitter):
            expected = [(TEXT.index(s), TEXT.index(s) + len(s)) for s in SENTENCES]
        else:  # the splitter's own cuts (tests/reference.py)
            expected = marked_spans(splitter.split_text, ".")(TEXT)
        assert len(expected) > 1
        got = [
            (c.metadata["split_idx_start"], c.metadata["split_idx_start"] + len(c.page_content))
            for c in out
        ]
        assert got == expected
        assert [c.page_content for c in out] == [TEXT[a:b] for a, b in expected]

    def test_source_id_falls_back_to_document_id_then_text_hash(self):
        docs = [Document(page_content="One. Two.", id="given"), Document(page_content="Three.")]
        out = WindowSplitter(SentenceSplitter(), InMemoryStore()).split_documents(docs)
        ids = [c.metadata["source_id"] for c in out]
        assert ids[:2] == ["given", "given"]
        assert ids[2].startswith("sha256-")
        again = WindowSplitter(SentenceSplitter(), InMemoryStore()).split_documents(docs[1:])
        assert again[0].metadata["source_id"] == ids[2]

    def test_composite_source_id_needs_every_field(self):
        splitter = WindowSplitter(
            SentenceSplitter(), InMemoryStore(), source_id_meta_field=["book", "chapter"]
        )
        out = splitter.split_documents(
            [Document(page_content="A. B.", metadata={"book": "b|1", "chapter": 2})]
        )
        assert out[0].id == chunk_key("b\\|1|2", 0)
        with pytest.raises(ValueError, match=r"\['chapter'\].*composite key"):
            splitter.split_documents([Document(page_content="A.", metadata={"book": "b"})])

    def test_duplicate_source_in_one_call_raises(self):
        splitter = WindowSplitter(SentenceSplitter(), InMemoryStore())
        doc = Document(page_content="A.", metadata={"source_id": "x"})
        with pytest.raises(ValueError, match="'x' appears twice"):
            splitter.split_documents([doc, doc])

    def test_not_a_text_splitter_raises(self):
        with pytest.raises(TypeError, match="TextSplitter; got function"):
            WindowSplitter(lambda text: [text], InMemoryStore())  # type: ignore[arg-type]

    def test_byte_store_through_the_codec_and_unicode_ids(self):
        store = DocumentCodecStore(InMemoryByteStore())
        splitter = WindowSplitter(SentenceSplitter(), store)
        out = splitter.split_documents([Document(page_content=TEXT, id="naïve/../doc 1")])
        assert out[0].id == "na.c3.afve.2f.2e.2e.2fdoc.201/chunk/0"
        (window,) = splitter.expander(window_size=1).invoke([out[5]])
        assert window.page_content == " ".join(SENTENCES[4:7])

    async def test_async_split_equals_sync(self):
        sync_store, async_store = InMemoryStore(), InMemoryStore()
        doc = Document(page_content=TEXT, id="n")
        sync = WindowSplitter(ten_word_splitter(), sync_store).transform_documents([doc])
        splitter = WindowSplitter(ten_word_splitter(), async_store)
        assert await splitter.atransform_documents([doc]) == sync
        keys = [c.id for c in sync]
        assert async_store.mget(keys) == sync_store.mget(keys)


class TestSentenceWindowExpander:
    def test_init_default(self, store):
        expander = SentenceWindowExpander(store=store)
        assert expander.window_size == 3
        assert expander.source_id_meta_field == "source_id"
        assert expander.split_id_meta_field == "split_id"
        assert expander.raise_on_missing_meta_fields is True

    @pytest.mark.parametrize("size", [-1, 1.5, "2", True])
    def test_init_bad_window_size(self, store, size):
        with pytest.raises(ValueError, match=r"window_size must be an integer >= 0"):
            SentenceWindowExpander(store=store, window_size=size)

    @pytest.mark.parametrize("field", [[], "", ["a", ""]])
    def test_init_bad_source_id_meta_field(self, store, field):
        with pytest.raises(ValueError, match="source_id_meta_field must be"):
            SentenceWindowExpander(store=store, source_id_meta_field=field)

    def test_seed_example_bm25_then_window(self, chunks):
        bm25 = BM25Retriever.from_documents(chunks, k=1)
        chain = bm25 | SentenceWindowExpander(store=chunks_store(chunks), window_size=3)
        (hit,) = bm25.invoke("third")
        assert "third" in hit.page_content
        (window,) = chain.invoke("third")
        split_id = hit.metadata["split_id"]
        expected = expected_window(split_id, 3, len(chunks))
        assert window.page_content == expected
        assert TEXT[window.metadata["start"] : window.metadata["end"]] == expected
        assert window.metadata["split_ids"] == list(range(max(0, split_id - 3), split_id + 4))

    def test_per_call_window_size(self, chunks, store):
        expander = SentenceWindowExpander(store=store)
        hit = chunks[5]
        for size in (0, 1, 2, 6):
            (window,) = expander.invoke([hit], window_size=size)
            assert window.page_content == expected_window(5, size, len(chunks))
            assert window.metadata["window_size"] == size
            assert expander.run([hit], window_size=size)["context_windows"] == [
                expected_window(5, size, len(chunks))
            ]
        assert expander.window_size == 3

    def test_per_call_window_size_in_a_chain(self, chunks, store):
        hits = RunnableLambda(lambda _: [chunks[5]])
        bound = hits | SentenceWindowExpander(store=store).bind(window_size=1)
        assert bound.invoke("q")[0].page_content == expected_window(5, 1, len(chunks))
        configurable = SentenceWindowExpander(store=store).configurable_fields(
            window_size=ConfigurableField(id="window_size")
        )
        chain = hits | configurable
        out = chain.invoke("q", config={"configurable": {"window_size": 0}})
        assert out[0].page_content == chunks[5].page_content

    def test_per_call_window_size_negative_raises(self, chunks, store):
        expander = SentenceWindowExpander(store=store)
        with pytest.raises(ValueError, match=r"integer >= 0 .*got -1"):
            expander.invoke(chunks[:1], window_size=-1)
        with pytest.raises(ValueError, match=r"integer >= 0 .*got -1"):
            expander.run(chunks[:1], window_size=-1)
        with pytest.raises(ValueError, match=r"Unknown option\(s\) \['k'\].*\['window_size'\]"):
            expander.invoke(chunks[:1], k=2)

    def test_document_without_split_id(self, store):
        doc = Document(page_content="orphan", metadata={"source_id": "s"}, id="d7")
        with pytest.raises(ValueError, match=r"id='d7' lacks the metadata .* \['split_id'\]"):
            SentenceWindowExpander(store=store).invoke([doc])

    def test_document_without_source_id(self, store):
        doc = Document(page_content="no source here", metadata={"split_id": 0})
        with pytest.raises(ValueError, match=r"'no source here' lacks .*\['source_id'\]"):
            SentenceWindowExpander(store=store).run([doc])

    def test_missing_meta_fields_pass_through(self, chunks, store):
        stray = Document(page_content="stray", metadata={"score": 0.5})
        expander = SentenceWindowExpander(store=store, raise_on_missing_meta_fields=False)
        out = expander.invoke([stray, chunks[2]], window_size=0)
        assert out[0] is stray
        assert out[1].page_content == chunks[2].page_content
        result = expander.run([stray, chunks[2]], window_size=0)
        assert result["context_windows"] == ["stray", chunks[2].page_content]
        assert result["context_documents"] == [[stray], [chunks[2]]]

    def test_bad_split_id_raises(self, store):
        doc = Document(page_content="x", metadata={"source_id": "s", "split_id": "two"})
        with pytest.raises(ValueError, match=r"split_id='two'; it must be an integer >= 0"):
            SentenceWindowExpander(store=store).invoke([doc])

    def test_composite_source_id(self):
        store = InMemoryStore()
        fields = ["book", "chapter"]
        docs = [
            Document(page_content=TEXT, metadata={"book": "b", "chapter": chapter})
            for chapter in (1, 2)
        ]
        chunks = WindowSplitter(ten_word_splitter(), store, source_id_meta_field=fields)
        out = chunks.split_documents(docs)
        second = [c for c in out if c.metadata["chapter"] == 2]
        store.mdelete([c.id for c in out if c.metadata["chapter"] == 1])
        expander = SentenceWindowExpander(store=store, source_id_meta_field=fields, window_size=1)
        (window,) = expander.invoke([second[3]])
        assert window.page_content == expected_window(3, 1, len(second))
        assert window.metadata["source_id"] == "b|2"

    def test_deleted_neighbour_ends_the_window_and_says_so(self, chunks, store):
        store.mdelete([chunks[3].id, chunks[8].id])
        expander = SentenceWindowExpander(store=store, window_size=3)
        (window,) = expander.invoke([chunks[5]])
        meta = window.metadata
        assert meta["split_ids"] == [4, 5, 6, 7]
        assert meta["missing_split_ids"] == [3, 8]
        assert window.page_content == " ".join(SENTENCES[4:9])
        assert TEXT[meta["start"] : meta["end"]] == window.page_content
        docs = expander.run([chunks[5]])["context_documents"]
        assert [[d.metadata["split_id"] for d in group] for group in docs] == [[4, 5, 6, 7]]

    def test_deleted_last_chunk_is_reported(self, chunks, store):
        last = len(chunks) - 1
        store.mdelete([chunks[last].id])
        (window,) = SentenceWindowExpander(store=store, window_size=2).invoke([chunks[last - 1]])
        assert window.metadata["missing_split_ids"] == [last]
        assert window.metadata["split_ids"] == [last - 3, last - 2, last - 1]

    def test_retrieved_chunk_missing_from_store_still_anchors_its_window(self, chunks, store):
        store.mdelete([chunks[4].id])
        (window,) = SentenceWindowExpander(store=store, window_size=1).invoke([chunks[4]])
        assert window.page_content == expected_window(4, 1, len(chunks))
        assert window.metadata["missing_split_ids"] == []

    def test_contained_chunk_merges_exactly(self):
        text = "The bird sings. The dog barks."
        store = InMemoryStore()
        spans = [(0, 15), (4, 8), (12, 30)]  # "The bird sings." contains "bird"
        docs = [
            Document(
                page_content=text[a:b],
                metadata={"source_id": "s", "split_id": i, "split_idx_start": a},
            )
            for i, (a, b) in enumerate(spans)
        ]
        store.mset([(chunk_key("s", i), d) for i, d in enumerate(docs)])
        (window,) = SentenceWindowExpander(store=store, window_size=1).invoke([docs[1]])
        assert window.page_content == text
        assert (window.metadata["start"], window.metadata["end"]) == (0, 30)

    def test_without_offsets_chunks_join_in_split_id_order(self):
        store = InMemoryStore()
        docs = [
            Document(page_content=f"part {i}", metadata={"source_id": "s", "split_id": i})
            for i in range(4)
        ]
        store.mset([(chunk_key("s", i), d) for i, d in enumerate(docs)])
        (window,) = SentenceWindowExpander(store=store, window_size=5).invoke([docs[2]])
        assert window.page_content == "part 0 part 1 part 2 part 3"
        assert "start" not in window.metadata
        assert window.metadata["split_ids"] == [0, 1, 2, 3]

    def test_output_metadata_keeps_the_retrieved_documents_own(self, chunks, store):
        meta = {**chunks[2].metadata, "score": 0.9}
        hit = Document(page_content=chunks[2].page_content, metadata=meta)
        (window,) = SentenceWindowExpander(store=store, window_size=1).invoke([hit])
        meta = window.metadata
        assert meta["score"] == 0.9
        assert meta["title"] == "numbers"
        assert meta["source_id"] == "numbers"
        assert meta["split_ids"] == [1, 2, 3]
        assert meta["missing_split_ids"] == []
        assert TEXT[meta["start"] : meta["end"]] == window.page_content

    def test_outputs_in_input_order_grouped_per_document(self, chunks, store):
        hits = [chunks[6], chunks[0], chunks[6]]
        result = SentenceWindowExpander(store=store, window_size=1).run(hits)
        assert result["context_windows"] == [
            expected_window(6, 1, len(chunks)),
            expected_window(0, 1, len(chunks)),
            expected_window(6, 1, len(chunks)),
        ]
        groups = [[d.metadata["split_id"] for d in g] for g in result["context_documents"]]
        assert groups == [[5, 6, 7], [0, 1], [5, 6, 7]]

    def test_one_batched_mget_per_call(self, chunks, store):
        expander = SentenceWindowExpander(store=store, window_size=2)
        store.mget_calls.clear()
        expander.invoke([chunks[1], chunks[7], chunks[2]])
        # one mget of the sources' manifests (where an updated source keeps its nodes),
        # then one of every chunk of every window
        manifests, keys = store.mget_calls
        assert manifests == ["numbers/manifest"]
        assert sorted(keys) == sorted({chunks[i].id for i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]})
        expander.run(chunks[:1])
        expander.invoke([])
        assert len(store.mget_calls) == 4

    async def test_async_equals_sync(self, chunks, store):
        store.mdelete([chunks[3].id])
        expander = SentenceWindowExpander(store=store)
        hits = [chunks[5], chunks[0], chunks[9]]
        store.mget_calls.clear()
        assert await expander.ainvoke(hits) == expander.invoke(hits)
        assert await expander.arun(hits, window_size=1) == expander.run(hits, window_size=1)
        assert await expander.ainvoke(hits, window_size=0) == expander.invoke(hits, window_size=0)
        assert len(store.mget_calls) == 12  # manifests, then chunks: six calls, twice each

    def test_not_a_list_raises(self, store):
        with pytest.raises(TypeError, match=r"list of Documents .*got str"):
            SentenceWindowExpander(store=store).invoke("third")  # type: ignore[arg-type]

    def test_expands_a_small_to_big_retrievers_sentences(self):
        doc = Document(page_content=" ".join(SENTENCES), id="numbers")
        retriever = SmallToBigRetriever.from_documents(
            [doc], DeterministicFakeEmbedding(size=16), mode="window"
        )
        (leaf,) = retriever.vectorstore.similarity_search("third", k=1)
        expander = SentenceWindowExpander(store=retriever.docstore, level="sentence", window_size=1)
        (window,) = expander.invoke([leaf])
        split_id = leaf.metadata["split_id"]
        lo, hi = max(0, split_id - 1), min(len(SENTENCES) - 1, split_id + 1)
        assert window.page_content.strip() == " ".join(SENTENCES[lo : hi + 1])
        start, end = window.metadata["start"], window.metadata["end"]
        assert window.page_content == doc.page_content[start:end]


def chunks_store(chunks: list[Document]) -> InMemoryStore:
    """A fresh store holding ``chunks`` under their keys."""
    store = InMemoryStore()
    store.mset([(str(c.id), c) for c in chunks])
    return store
