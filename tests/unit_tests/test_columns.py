"""Columns instead of objects: shapes, the child index's records, the node store.

Every stored value must come back equal (text, metadata with its key order,
key), through writes, deletes and a round trip through files, for any text
(non-ASCII, lone surrogates) and any metadata JSON can hold; what JSON can not
give back equal is kept whole and still comes back equal.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.merge import Chunk, WholeLeaf, chunk_of, merge_chunks
from langchain_s2b.store.base.columns import Shapes
from langchain_s2b.store.nodes import node_keys
from langchain_s2b.store.nodes.levels import byte_offsets
from langchain_s2b.store.nodes.node_keys import HEADS_KEPT, NODE_KEY, KeyReader
from langchain_s2b.store.nodes.node_store import NodeStore
from langchain_s2b.store.vectors.records import Records

TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("é—\U0001f600\ud800"), max_size=12)
SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSONISH = st.recursive(
    SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3)
)
ODD = st.tuples(st.integers()) | st.dictionaries(st.integers(), st.integers(), min_size=1)
"""Values JSON would not give back equal (a tuple, a non-string key)."""
NAMES = st.sampled_from(["split_id", "start", "end", "split_idx_start", "level", "title", "n"])


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal, with the keys in the same order, and every value of the same type."""
    return a == b and list(a) == list(b) and _types(a) == _types(b)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return [(k, _types(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return (type(value), [_types(v) for v in value])
    return type(value)


class TestShapes:
    @given(st.lists(st.dictionaries(NAMES, SCALAR | JSONISH | ODD, max_size=6), max_size=8))
    def test_every_metadata_comes_back_equal_or_is_refused(self, metas: list[dict[str, Any]]):
        shapes = Shapes()
        for meta in metas:
            coded = shapes.encode(meta)
            if coded is None:
                continue
            assert _same(shapes.decode(*coded), meta)

    def test_siblings_share_one_shape_and_keep_their_numbers(self):
        ancestors = [["a/doc/0", 0, 90, 3]]
        shapes = Shapes()
        metas = [
            {"title": "T", "source_key": "a", "level": "sentence", "split_id": i, "start": 30 * i,
             "end": 30 * i + 30, "split_idx_start": 30 * i, "ancestors": ancestors}
            for i in range(3)
        ]  # fmt: skip
        coded = [shapes.encode(m) for m in metas]
        assert [c[0] for c in coded if c] == [0, 0, 0]
        assert [shapes.decode(*c) for c in coded if c] == metas
        assert shapes.node_key(0, 2) == "a/sentence/2"

    def test_an_equal_but_other_typed_value_is_another_shape(self):
        shapes = Shapes()
        first = shapes.encode({"v": [1], "start": 0})
        second = shapes.encode({"v": [1.0], "start": 1})
        assert first is not None
        assert second is not None
        assert first[0] != second[0]
        assert _same(shapes.decode(*second), {"v": [1.0], "start": 1})

    def test_a_split_idx_start_other_than_start_is_kept(self):
        shapes = Shapes()
        meta = {"start": 4, "split_idx_start": 9, "end": 7}
        coded = shapes.encode(meta)
        assert coded is not None
        assert _same(shapes.decode(*coded), meta)
        sibling = {"start": 5, "split_idx_start": 9, "end": 8}
        coded = shapes.encode(sibling)
        assert coded is not None
        assert _same(shapes.decode(*coded), sibling)


ROW = st.tuples(
    st.sampled_from(["a", "b.g1", "c"]),
    st.integers(0, 6),
    TEXT,
    st.dictionaries(st.sampled_from(["title", "n"]), JSONISH | ODD, max_size=2),
    st.booleans(),
)
"""``(source, split, text, user metadata, derived key)`` of one row."""


def _row(source: str, split: int, meta: dict[str, Any], derived: bool) -> tuple[str, dict]:
    full = {**meta, "source_key": source, "level": "sentence", "split_id": split,
            "start": 2 * split, "end": 2 * split + 1, "split_idx_start": 2 * split}  # fmt: skip
    key = f"{source}/sentence/{split}" if derived else f"other:{source}:{split}"
    return key, full


class TestRecords:
    @settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(rows=st.lists(ROW, max_size=12), data=st.data())
    def test_writes_deletes_and_files_give_every_row_back(
        self, rows: list[Any], data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        records, model = Records(), {}
        next_row = 0
        for source, split, text, meta, derived in rows:
            key, full = _row(source, split, meta, derived)
            if records.row(key) >= 0:
                old = records.row(key)
                records.remove([old])
                del model[old]
            records.add([next_row], [key], [text], [full])
            model[next_row] = (key, text, full)
            next_row += 1
        gone = data.draw(st.lists(st.sampled_from(sorted(model) or [0]), unique=True))
        gone = [r for r in gone if r in model]
        records.remove(gone)
        for row in gone:
            del model[row]
        self._check(records, model)
        where = tmp_path_factory.mktemp("records")
        records.write(where)
        again, renumbered = Records.read(where, next_row)
        assert renumbered is None  # ids this dense are kept
        self._check(again, model, read_back=True)

    def test_rows_of_sparse_ids_are_numbered_again(self, tmp_path: Path) -> None:
        """Issue 28: one huge row id sized every column (a crafted save asked for terabytes)."""
        records = Records()
        huge = 10**12
        records.add([3, 7], ["a/s/0", "a/s/1"], ["x", "yz"], [{"n": 1}, {"n": 2}])
        records.write(tmp_path)
        with np.load(tmp_path / "records.npz") as saved:
            arrays = {name: saved[name] for name in saved.files}
        arrays["rows"] = np.asarray([3, huge])  # a row id no save of 2 rows could need
        np.savez(tmp_path / "records.npz", **arrays)
        again, renumbered = Records.read(tmp_path, huge + 1)
        assert renumbered is not None
        assert renumbered.tolist() == [3, huge]
        assert [again.record(0), again.record(1)] == [
            ("a/s/0", "x", {"n": 1}),
            ("a/s/1", "yz", {"n": 2}),
        ]
        assert again.row("a/s/1") == 1
        assert again._live.size == 2

    @staticmethod
    def _check(records: Records, model: dict[int, Any], *, read_back: bool = False) -> None:
        assert len(records) == len(model)
        assert sorted(records.keys()) == sorted(k for k, _, _ in model.values())
        for row, (key, text, meta) in model.items():
            got = records.record(row)
            assert got is not None
            assert got[:2] == (key, text)
            if read_back:  # what JSON can not hold comes back as JSON gives it
                assert got[2] == _json(meta)
            else:
                assert _same(got[2], meta)
            assert records.row(key) == row
        # issue 34: a search's rows placed in one pass, as each row's metadata names them
        rows = [-1, *range(max(model, default=0) + 3)]
        expected = []
        for row in rows:
            key, _, meta = model.get(row, ("", "", {}))
            named = f"{meta.get('source_key')}/{meta.get('level')}/{meta.get('split_id')}"
            # a row whose metadata JSON can not hold is kept whole, and read at once
            found = row in model and key == named and _same(_json(meta), meta)
            expected.append((key, meta["source_key"], meta["split_id"]) if found else None)
        assert records.node_places(np.asarray(rows, dtype=np.int64)) == expected
        live = sorted(model)  # every row inside and live (one pass when none is named)
        by_row = dict(zip(rows, expected, strict=True))
        assert records.node_places(np.asarray(live, dtype=np.int64)) == [by_row[r] for r in live]
        held = {
            model[r][0]: (r, place) for r, place in zip(rows, expected, strict=True) if r in model
        }
        asked = [*held, "a/sentence/99", "zz/sentence/0", "other:a:0", "a/sentence/01"]
        assert records.node_rows(asked) == [held.get(key, (-1, None)) for key in asked]

    def test_a_file_naming_rows_past_the_next_id_is_refused(self, tmp_path: Path) -> None:
        records = Records()
        records.add([0, 1], ["a/s/0", "a/s/1"], ["x", "y"], [{}, {}])
        records.write(tmp_path)
        with pytest.raises(ValueError, match="row ids must be distinct and in"):
            Records.read(tmp_path, 1)


def _json(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))


class TestByteOffsets:
    @given(TEXT)
    def test_offsets_are_utf8_lengths(self, text: str) -> None:
        offsets = byte_offsets(text)
        expected = [len(text[:i].encode("utf-8", "surrogatepass")) for i in range(len(text) + 1)]
        assert (offsets is None and text.isascii()) or list(offsets) == expected  # type: ignore[arg-type]


SOURCE_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("é—\U0001f600"), max_size=30)


@st.composite
def node_batches(draw: st.DrawFn) -> list[tuple[str, Document]]:
    """A source's doc node and some slices of it (some wrong), a manifest, a foreign value."""
    source = draw(st.sampled_from(["s", "t.g2"]))
    text = draw(SOURCE_TEXT)
    user = draw(st.dictionaries(st.sampled_from(["title", "n"]), JSONISH | ODD, max_size=2))
    pairs: list[tuple[str, Document]] = []
    if draw(st.booleans()):
        meta = {**user, "source_key": source, "level": "doc", "split_id": 0, "start": 0,
                "end": len(text)}  # fmt: skip
        pairs.append(
            (f"{source}/doc/0", Document(page_content=text, metadata=meta, id=f"{source}/doc/0"))
        )
    for split in draw(st.lists(st.integers(0, 5), max_size=4, unique=True)):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, len(text)))
        body = text[start:end] if draw(st.booleans()) else draw(TEXT)
        key = f"{source}/sentence/{split}"
        meta = {**user, "level": "sentence", "split_id": split, "start": start, "end": end,
                "split_idx_start": start}  # fmt: skip
        named = draw(st.sampled_from([None, source, "other"]))  # the source its metadata names
        if named is not None:
            meta["source_key"] = named
        pairs.append((key, Document(page_content=body, metadata=meta, id=key)))
        if draw(st.booleans()):  # the same key and a newline: another key, never this node
            other = f"{key}\n"
            pairs.append((other, Document(page_content=draw(TEXT), metadata=meta, id=other)))
    pairs.append((f"{source}/manifest", Document("", metadata={"v": 1}, id=f"{source}/manifest")))
    pairs.append(("elsewhere", Document(draw(TEXT), metadata={"x": draw(JSONISH)})))
    return pairs


def _runs_read_as_slices(store: NodeStore, model: dict[str, Document]) -> None:
    """Any run ``read_spans`` answers (issue 34) is its leaves' merge: the slice of their
    source's text, every leaf the node its key names, none empty, no gap; with the first
    leaf's metadata. Worked out from the stored documents alone."""
    texts = {k.partition("/")[0]: d.page_content for k, d in model.items() if "/doc/0" in k}
    prefixes = ["s/sentence/", "t.g2/sentence/", "s/doc/", "s/sentence", "x/sentence/", "/"]
    runs = [(p, lo, hi) for p in prefixes for lo in range(-1, 7) for hi in range(lo - 1, 7)]
    for (prefix, lo, hi), span in zip(runs, store.read_spans(runs), strict=True):
        if span is None:
            continue
        source, level = prefix[:-1].split("/")
        docs = [model.get(f"{prefix}{i}") for i in range(lo, hi + 1)]
        assert 0 <= lo <= hi, (prefix, lo, hi)
        assert all(doc is not None for doc in docs), (prefix, lo, hi)
        chunks = []
        for i, doc in enumerate(docs, start=lo):
            assert doc is not None
            meta = doc.metadata
            assert (meta.get("source_key"), meta["level"], meta["split_id"]) == (source, level, i)
            chunks.append(chunk_of(doc))
        assert all(c.end > c.start for c in chunks), (prefix, lo, hi)
        merged = merge_chunks(chunks)
        assert merged.gaps == ()
        if source in texts:  # (a source's text is kept while any of its nodes is held)
            assert merged.text == texts[source][merged.start : merged.end]
        assert span == (merged.text, merged.start, merged.end, docs[0].metadata)  # type: ignore[union-attr]
        assert list(span.metadata) == list(docs[0].metadata)  # type: ignore[union-attr]


class TestNodeStore:
    @settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(batches=st.lists(node_batches(), min_size=1, max_size=4), data=st.data())
    def test_what_is_stored_comes_back_equal(
        self, batches: list[Any], data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        store, model = NodeStore(), {}
        for pairs in batches:
            store.mset(pairs)
            model.update(pairs)
            if model and data.draw(st.booleans()):
                gone = data.draw(st.lists(st.sampled_from(sorted(model)), unique=True))
                store.mdelete(gone)
                for key in gone:
                    del model[key]
        self._check(store, model)
        where = tmp_path_factory.mktemp("nodes")
        store.write(where)
        again = NodeStore.read(where)
        model = {k: _as_json(d) for k, d in model.items()}
        self._check(again, model)
        more = data.draw(node_batches())  # a store read back takes writes as any other
        again.mset(more)
        model.update(more)
        if model:
            gone = data.draw(st.lists(st.sampled_from(sorted(model)), unique=True))
            again.mdelete(gone)
            for key in gone:
                del model[key]
        self._check(again, model)

    @staticmethod
    def _check(store: NodeStore, model: dict[str, Document]) -> None:
        assert sorted(store.yield_keys()) == sorted(model)
        assert len(store) == len(model)
        for key, doc in model.items():
            (got,) = store.mget([key])
            assert got == doc, key
            assert list(got.metadata) == list(doc.metadata)  # type: ignore[union-attr]
        # read for assembly: the document, or the chunk it gives for a node of its key's source
        keys = [*model, "s/sentence/9", "t.g2/doc/1", "nowhere"]
        whole = set(sorted(model)[::2])
        for key, read in zip(keys, store.read_leaves(keys, whole), strict=True):
            doc = model.get(key)
            if doc is None or not isinstance(read, Chunk | WholeLeaf):
                assert read == doc, key
                continue
            split = int(key.rpartition("/")[2])
            if key in whole:  # its chunk and the metadata mget gives it
                assert isinstance(read, WholeLeaf), key
                assert read.metadata == doc.metadata, key
                assert list(read.metadata) == list(doc.metadata), key
                read = read.chunk
            assert read == chunk_of(doc) == (*chunk_of(doc)[:3], split), key
            assert doc.metadata["source_key"] == key.partition("/")[0], key
        _runs_read_as_slices(store, model)

    def test_a_node_of_its_keys_source_is_read_as_its_chunk(self) -> None:
        store = NodeStore()
        meta = {"source_key": "s", "level": "sentence", "split_id": 1, "start": 5, "end": 9}
        other = {**meta, "source_key": "t"}  # names another source than its key
        store.mset(
            [
                ("s/sentence/1", Document("Two.", metadata=meta, id="s/sentence/1")),
                ("u/sentence/1", Document("Two.", metadata=other, id="u/sentence/1")),
            ]
        )
        assert store.read_leaves(["s/sentence/1", "u/sentence/1", "s/sentence/2"]) == [
            Chunk(5, 9, "Two.", 1),
            Document("Two.", metadata=other, id="u/sentence/1"),
            None,
        ]
        whole = {"s/sentence/1", "u/sentence/1"}
        assert store.read_leaves(["s/sentence/1", "u/sentence/1"], whole=whole) == [
            WholeLeaf(Chunk(5, 9, "Two.", 1), meta),
            Document("Two.", metadata=other, id="u/sentence/1"),
        ]

    def test_a_changed_source_text_keeps_its_old_slices(self) -> None:
        store = NodeStore()
        doc = Document("héllo wörld", metadata={"start": 0, "end": 11}, id="s/doc/0")
        leaf = Document("wörld", metadata={"start": 6, "end": 11}, id="s/sentence/1")
        store.mset([("s/doc/0", doc), ("s/sentence/1", leaf)])
        store.mset([("s/doc/0", Document("other", metadata={"start": 0, "end": 5}, id="s/doc/0"))])
        assert store.mget(["s/sentence/1"]) == [leaf]


class TestKeyReader:
    """The read path's key parser agrees with the node key grammar on every string."""

    reader = KeyReader()

    @settings(max_examples=400)
    @given(
        st.lists(
            st.text(alphabet="ab/09_Z\n\u0663\u00b2\u00e9-", max_size=6), min_size=1, max_size=4
        )
    )
    def test_agrees_with_the_grammar(self, parts: list[str]) -> None:
        key = "/".join(parts)
        match = NODE_KEY.match(key)
        want = None if match is None else ((match[1], match[2]), int(match[3]))
        assert self.reader(key) == want
        assert self.reader(key) == want  # its head read from what it kept

    def test_by_hand(self) -> None:
        reader = KeyReader()
        assert reader("s.g2/sentence/12") == (("s.g2", "sentence"), 12)
        assert reader("s/sentence/0") == (("s", "sentence"), 0)
        for bad in ["s/sentence/01", "s/sentence/", "/sentence/1", "s//1", "s/Sentence/1"]:
            assert reader(bad) is None, bad
        for bad in ["s/a/b/1", "s/sentence/1\n", "s/sentence/\u0663", "s/sentence/\u00b2"]:
            assert reader(bad) is None, bad

    def test_threads_sharing_one_reader_read_every_key_right(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Readers share a node store: with the kept heads cleared all the time, every thread
        reads every key as one thread does (each lookup is one ``dict.get``)."""
        monkeypatch.setattr(node_keys, "HEADS_KEPT", 2)  # cleared all the time
        reader = KeyReader()
        keys = [f"s{i % 7}/level{i % 3}/{i}" for i in range(300)] + ["s/Bad/1", "s/x/01"]
        want = [reader(key) for key in keys]
        assert want[:2] == [(("s0", "level0"), 0), (("s1", "level1"), 1)]
        assert want[-2:] == [None, None]

        def read_all(_: int) -> bool:
            return all([reader(key) for key in keys] == want for _ in range(200))

        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(read_all, range(4)))

    def test_keeps_a_bounded_number_of_heads(self) -> None:
        reader = KeyReader()
        for i in range(HEADS_KEPT + 10):
            assert reader(f"s{i}/sentence/{i}") == ((f"s{i}", "sentence"), i)
        assert len(reader._heads) <= HEADS_KEPT


def _as_json(doc: Document) -> Document:
    return Document(page_content=doc.page_content, metadata=_json(doc.metadata), id=doc.id)


class TestOpeningBuildsNothing:
    def test_load_makes_no_document_and_indexes_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from langchain_s2b.store.lexical import lexical_index
        from langchain_s2b.store.nodes import node_store
        from langchain_s2b.store.snapshots import persist

        docs = [Document(f"Part {i}. Walrus {i} swims. The end {i}.", id=f"d{i}") for i in range(5)]
        r = SmallToBigRetriever.from_documents(
            docs, DeterministicFakeEmbedding(size=16), mode="window"
        )
        r.save(tmp_path / "idx")
        made: list[Any] = []
        indexed: list[Any] = []
        real = Document.__init__

        def count(self: Document, *args: Any, **kwargs: Any) -> None:
            made.append(kwargs.get("id"))
            real(self, *args, **kwargs)

        monkeypatch.setattr(Document, "__init__", count)
        monkeypatch.setattr(lexical_index, "_add", lambda *a, **k: indexed.append(a))
        loaded = SmallToBigRetriever.load(tmp_path / "idx", DeterministicFakeEmbedding(size=16))
        assert made == []
        assert indexed == []
        assert isinstance(loaded.docstore, NodeStore)
        assert persist.current_snapshot(tmp_path / "idx").is_dir()
        assert node_store.FILES
        store = loaded.vectorstore
        assert isinstance(store, FaissIndex)
        monkeypatch.undo()
        assert loaded.invoke("walrus 3") == r.invoke("walrus 3")
        assert sorted(store.keys()) == sorted(r.vectorstore.keys())  # type: ignore[attr-defined]
        assert np.array_equal(
            np.sort(np.asarray(list(store._ids.values()))),
            np.sort(np.asarray(list(r.vectorstore._ids.values()))),  # type: ignore[attr-defined]
        )
