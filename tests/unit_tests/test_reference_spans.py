"""Chunk offsets: ``locate_chunks`` against the reference's exact spans (C6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore
from langchain_text_splitters import (
    CharacterTextSplitter,
    RecursiveCharacterTextSplitter,
    TextSplitter,
)

from langchain_s2b import SmallToBigRetriever, WindowSplitter
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.tree import locate_chunks, marked, text_splitter_spans

from .. import reference as ref
from ._embeddings import BagOfWords

DISK_FULL = "Error: disk full.\n" * 8


class TestRepeatedText:
    """C6: each chunk was searched for from the previous one's start + 1."""

    def test_locate_chunks_finds_the_true_starts(self) -> None:
        splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0)
        chunks = splitter.split_text(DISK_FULL)
        assert locate_chunks(DISK_FULL, chunks) == [(0, 35), (36, 71), (72, 107), (108, 143)]
        own = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0, add_start_index=True)
        starts = [d.metadata["start_index"] for d in own.create_documents([DISK_FULL])]
        assert starts == [0, 36, 72, 108]

    def test_the_retriever_indexes_each_line_once(self) -> None:
        splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0)
        retriever = SmallToBigRetriever.from_documents(
            [Document(page_content=DISK_FULL, id="log")],
            BagOfWords(),
            mode="window",
            child_splitter=splitter,
        )
        leaves = retriever.docstore.mget([f"log/sentence/{i}" for i in range(4)])
        spans = [(d.metadata["start"], d.metadata["end"]) for d in leaves if d is not None]
        assert spans == [(0, 36), (36, 72), (72, 108), (108, 144)]
        assert [d.page_content for d in leaves if d is not None] == [DISK_FULL[:36]] * 4

    def test_window_splitter_stamps_the_true_offsets(self) -> None:
        splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0)
        chunks = WindowSplitter(splitter, InMemoryStore()).split_documents(
            [Document(page_content=DISK_FULL, id="log")]
        )
        assert [c.metadata["split_idx_start"] for c in chunks] == [0, 36, 72, 108]

    def test_overlap_after_an_oversized_chunk(self) -> None:
        """Found by the reference: two placements of these strings cover the text equally
        well; only the splitter's own cuts say which (add_start_index guesses 17)."""
        text = "東京. 東京. 東京. 東京.\n\n東京. 東京. 東京. 東京."
        splitter = CharacterTextSplitter(separator=" ", chunk_size=7, chunk_overlap=3)
        spans = [(0, 7), (4, 11), (12, 20), (21, 28), (25, 32)]
        assert text_splitter_spans(splitter, text) == spans
        assert [text[a:b] for a, b in spans] == splitter.split_text(text)

    def test_overlapping_chunks_of_repeated_words(self) -> None:
        text = "ab " * 20
        splitter = RecursiveCharacterTextSplitter(chunk_size=8, chunk_overlap=3)
        own = RecursiveCharacterTextSplitter(chunk_size=8, chunk_overlap=3, add_start_index=True)
        starts = [d.metadata["start_index"] for d in own.create_documents([text])]
        assert [a for a, _ in locate_chunks(text, splitter.split_text(text))] == starts


WORDS = ["ab", "ab.", "Error:", "disk", "full.", "東京", "🙂", "x"]
SEPARATORS = [" ", "  ", "\n", "\n\n", "\t"]


@st.composite
def repeated_text(draw: st.DrawFn, separators: list[str]) -> str:
    pool = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    words = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=40))
    seps = draw(st.lists(st.sampled_from(separators), min_size=len(words), max_size=len(words)))
    return "".join(w + s for w, s in zip(words, seps, strict=True))


@st.composite
def splitting(draw: st.DrawFn) -> tuple[str, str, int, int]:
    kind = draw(st.sampled_from(["recursive", "character"]))
    # CharacterTextSplitter(separator=" ") rewrites a run of spaces: keep them single there.
    seps = SEPARATORS if kind == "recursive" else [" ", "\n", "\n\n"]
    size = draw(st.integers(4, 30))
    overlap = draw(st.sampled_from([0, 0, size // 4, size // 2]))
    return kind, draw(repeated_text(seps)), size, overlap


def make_splitter(kind: str, size: int, overlap: int) -> TextSplitter:
    if kind == "recursive":
        return RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap)
    return CharacterTextSplitter(separator=" ", chunk_size=size, chunk_overlap=overlap)


@given(case=splitting())
def test_text_splitter_spans_equal_the_exact_spans(case: tuple[str, str, int, int]) -> None:
    """Any LangChain character splitter, any repetition and overlap: its own cuts."""
    kind, text, size, overlap = case
    splitter = make_splitter(kind, size, overlap)
    exact = ref.marked_spans(splitter.split_text, "")(text)
    assert text_splitter_spans(splitter, text) == exact


@given(case=splitting(), tokens=st.booleans(), strip=st.booleans())
def test_the_marked_copy_cuts_where_the_real_text_is_cut(
    case: tuple[str, str, int, int], tokens: bool, strip: bool
) -> None:
    """The one-run path's assumption, checked against the splitter run on the real text."""
    kind, text, size, overlap = case
    length = estimate_tokens if tokens else len
    splitter: TextSplitter
    if kind == "recursive":
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=size, chunk_overlap=overlap, length_function=length, strip_whitespace=strip
        )
    else:
        splitter = CharacterTextSplitter(
            separator=" ", chunk_size=size, chunk_overlap=overlap, length_function=length
        )
    spans = text_splitter_spans(splitter, text)
    assert [text[a:b] for a, b in spans] == [c for c in splitter.split_text(text) if c]


@given(case=splitting())
def test_locate_chunks_is_exact_without_overlap(case: tuple[str, str, int, int]) -> None:
    """From the chunks' text alone (callables): exact whenever chunks do not overlap."""
    kind, text, size, _ = case
    splitter = make_splitter(kind, size, 0)
    exact = ref.marked_spans(splitter.split_text, "")(text)
    assert locate_chunks(text, splitter.split_text(text)) == exact


def _marked_by_hand(text: str, keep: set[str]) -> str:
    """One character at a time: whitespace and ``keep`` stay, the rest become private-use marks."""
    first = 0xFFFFE - 0xF0000
    out = []
    for i, c in enumerate(text):
        n = i % (first + 0x10FFFE - 0x100000)
        mark = chr(0xF0000 + n) if n < first else chr(0x100000 + n - first)
        out.append(c if c.isspace() or c in keep else mark)
    return "".join(out)


@given(
    text=st.text(alphabet=st.characters(exclude_categories=()), max_size=200),  # surrogates too
    keep=st.sets(st.sampled_from(list(".,;\n -ü")), max_size=4),
)
def test_the_marked_copy_equals_marking_each_character(text: str, keep: set[str]) -> None:
    assert marked(text, keep) == _marked_by_hand(text, keep)


def test_marks_wrap_around_after_every_private_use_code_point() -> None:
    text = "ab " * 50_000  # 150,000 characters: more than the 131,068 marks
    assert marked(text, {"b"}) == _marked_by_hand(text, {"b"})
