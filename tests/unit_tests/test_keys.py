"""Keys and source ids: one format, parsed and written in one place (core/keys.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryStore
from langchain_text_splitters import CharacterTextSplitter

from langchain_s2b import SmallToBigRetriever, WindowSplitter
from langchain_s2b.core.keys import (
    check_level_name,
    composite_source_id,
    encode_source_key,
    is_manifest_key,
    is_node_key,
    is_split_id,
    manifest_key,
    node_key,
    parse_node_key,
    split_generation,
)


class TestNodeKeys:
    @given(
        st.one_of(
            st.text(max_size=6),
            st.integers(0, 10**6).map(str),
            st.sampled_from(["0", "00", "01", "٣", "²", "1\n", " 1"]),
        )
    )
    def test_a_split_id_is_what_node_key_writes(self, text: str) -> None:
        # node_key writes str(int): ASCII digits without a leading zero, nothing else
        assert is_split_id(text) is (re.fullmatch(r"0|[1-9][0-9]*", text, re.ASCII) is not None)
        if is_split_id(text):
            assert node_key("s", "sentence", int(text)) == f"s/sentence/{text}"

    @pytest.mark.parametrize(
        ("key", "parts"),
        [
            ("abc/sentence/0", ("abc", "sentence", 0)),
            ("a.2fb/doc/0", ("a.2fb", "doc", 0)),
            ("x/child/17", ("x", "child", 17)),
        ],
    )
    def test_parse_inverts_node_key(self, key: str, parts: tuple[str, str, int]) -> None:
        assert parse_node_key(key) == parts
        assert node_key(*parts) == key
        assert is_node_key(key)

    @pytest.mark.parametrize(
        "key",
        [
            "abc/manifest",
            "abc/manifest/0",
            "abc/child",
            "/child/1",
            "a/Child/1",
            "a/b/-1",
            "a/child/1\n",
            "a/child\n/1",  # a level name ends where the text does: no newline after it
        ],
    )
    def test_not_node_keys(self, key: str) -> None:
        assert not is_node_key(key)
        with pytest.raises(ValueError, match="Not a node key"):
            parse_node_key(key)

    def test_a_level_name_or_generation_with_a_trailing_newline_is_none(self) -> None:
        with pytest.raises(ValueError, match="Level names must match"):
            check_level_name("sentence\n")
        assert split_generation("x.g2") == ("x", 2)
        assert split_generation("x.g2\n") == ("x.g2\n", 0)

    def test_manifest_key(self) -> None:
        assert manifest_key("abc") == "abc/manifest"
        assert is_manifest_key("abc/manifest")
        assert not is_manifest_key("abc/child/0")

    @given(st.text(min_size=1, max_size=40))
    def test_encoded_source_keys_are_store_safe(self, source_id: str) -> None:
        key = encode_source_key(source_id)
        assert "/" not in key
        assert key not in (".", "..")
        assert all(c.isascii() and (c.isalnum() or c in "_-.") for c in key)


class TestCompositeSourceIds:
    def test_values_with_the_separator_do_not_collide(self) -> None:
        fields = ["path", "page"]
        first = composite_source_id({"path": "x|1", "page": 2}, fields)
        second = composite_source_id({"path": "x", "page": "1|2"}, fields)
        assert first == "x\\|1|2"
        assert second == "x|1\\|2"

    @given(
        st.lists(st.text(max_size=6), min_size=2, max_size=2),
        st.lists(st.text(max_size=6), min_size=2, max_size=2),
    )
    def test_composite_ids_are_injective(self, a: list[str], b: list[str]) -> None:
        fields = ["f0", "f1"]
        ida = composite_source_id(dict(zip(fields, a, strict=True)), fields)
        idb = composite_source_id(dict(zip(fields, b, strict=True)), fields)
        assert (ida == idb) == (a == b)

    def test_retriever_keeps_both_sources(self) -> None:
        """Regression (issue 11, C4): the second document used to replace the first."""
        docs = [
            Document("alpha beta gamma.", metadata={"path": "x|1", "page": 2}),
            Document("delta epsilon zeta.", metadata={"path": "x", "page": "1|2"}),
        ]
        retriever = SmallToBigRetriever.from_documents(
            docs, DeterministicFakeEmbedding(size=16), source_id_key=["path", "page"], mode="window"
        )
        result = retriever.add_documents(docs)
        assert result.unchanged == ["x\\|1|2", "x|1\\|2"]
        found = retriever.invoke("alpha beta gamma.", k=2, window_size=0)
        assert sorted(d.metadata["source_id"] for d in found) == ["x\\|1|2", "x|1\\|2"]

    def test_retriever_and_expander_agree_on_composite_ids(self) -> None:
        meta = {"path": "a|b", "page": 3}
        doc = Document("One. Two. Three.", metadata=meta)
        store = InMemoryStore()
        chunks = WindowSplitter(
            CharacterTextSplitter(separator=" ", chunk_size=4, chunk_overlap=0),
            store,
            source_id_meta_field=["path", "page"],
        ).split_documents([doc])
        retriever = SmallToBigRetriever.from_documents(
            [doc], DeterministicFakeEmbedding(size=16), source_id_key=["path", "page"]
        )
        (hit,) = retriever.invoke("One.", k=1)
        assert hit.metadata["source_id"] == composite_source_id(meta, ["path", "page"])
        assert chunks[0].id == f"{encode_source_key(hit.metadata['source_id'])}/chunk/0"
